//! `ex_burn_release`: see the library crate docs and `ex_burn_release help`.

use std::io::Write;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match ex_burn_release::cli::run(&args) {
        Ok(outcome) => {
            print!("{}", outcome.stdout);
            let _ = std::io::stdout().flush();
            ExitCode::from(outcome.code)
        }
        Err(message) => {
            eprintln!("ex_burn_release: {message}");
            ExitCode::from(2)
        }
    }
}
