//! See `memlane_core::fuzzing::analyzer`: must never panic on any input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    memlane_core::fuzzing::analyzer(data);
});
