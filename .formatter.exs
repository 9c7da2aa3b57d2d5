[
  inputs: ["{mix,.formatter,.credo}.exs", "{config,lib,test,bench,examples}/**/*.{ex,exs}"],
  line_length: 110
]
