//! Prints the op vocabulary as `lib/ex_burn/op/table.eterm` holds it (see
//! `ex_burn_core::vocabulary`):
//!
//! ```text
//! cargo run --release -p ex_burn_core --example op_table > lib/ex_burn/op/table.eterm
//! ```

fn main() {
    print!("{}", ex_burn_core::vocabulary::render());
}
