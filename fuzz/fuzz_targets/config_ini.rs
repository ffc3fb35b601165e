//! `Config::parse_str` on arbitrary text.
//!
//! The input is used as UTF-8 when it is valid, and lossily converted otherwise (so byte-level
//! mutations still reach the parser). Oracle besides "never panics": an accepted configuration
//! written back with `to_ini_text` parses again, without error, to an equal configuration.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shoal::Config;

const ORIGIN: &str = "fuzz.ini";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok((cfg, _warnings)) = Config::parse_str_with_warnings(&text, ORIGIN) else { return };
    let regenerated = cfg.to_ini_text();
    let again = match Config::parse_str(&regenerated, ORIGIN) {
        Ok(c) => c,
        Err(e) => panic!("regenerated ini text does not parse: {e}\n--- text ---\n{regenerated}"),
    };
    assert_eq!(cfg, again, "regenerated ini text parses to a different configuration");
});
