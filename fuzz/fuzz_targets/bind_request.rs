#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| pi_conform::fuzzing::bind_request(data));
