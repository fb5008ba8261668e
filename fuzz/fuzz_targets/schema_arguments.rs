//! A tool's parameters schema and a call's arguments, both arbitrary: registration refuses or
//! accepts, and a check never overflows, never runs away, and answers within its text bound.
//! The check itself is shared with the test that replays this target's corpus.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../check/schema_arguments.rs"]
mod check;

fuzz_target!(|data: &[u8]| check::check(data));
