//! The rules profilerd's reports, the daemon and profilerctl share for
//! what people type and read: which frames a function named by a person
//! matches (`function_names`), and how a byte figure is written
//! (`figures`). One place for each, so that `callers`, `annotate`, `diff`
//! and the reports agree; the web view's JavaScript mirrors the function
//! rule (`transport/http/web/names.js`).
//!
//! Owns these rules only; it must depend on nothing (profilerctl compiles
//! it without the reports, the reports without the gRPC client).

mod figures;
mod function_names;

pub use figures::{bytes_text, bytes_with_count};
pub use function_names::{FunctionName, alias_of};
