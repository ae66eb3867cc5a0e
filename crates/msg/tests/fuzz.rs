//! Fuzzing the rule-table JSON reader (bounded: proptest's cases, run by `make test`): any text,
//! and a valid table with one byte changed, give a table that passes validation or a one-line
//! error naming the file; never a panic.

use huddle_msg::rules::RuleTable;
use proptest::prelude::*;
use topology::Machine;

fn valid_json() -> String {
    let m = Machine::from_synthetic("pack:1 l3:1 core:2 pu:1").expect("hwloc synthetic machine");
    serde_json::to_string_pretty(&RuleTable::from_caches(&m)).expect("a table serialises")
}

fn check(text: &str) {
    match RuleTable::from_json(text, "rules.json") {
        Ok(t) => {
            // What was accepted saves and loads back to the same table.
            let again = serde_json::to_string(&t).unwrap();
            let back = RuleTable::from_json(&again, "again").unwrap();
            assert_eq!(serde_json::to_string(&back).unwrap(), again);
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(msg.contains("rules.json"), "{msg}");
            assert!(!msg.contains('\n'), "one line: {msg:?}");
        }
    }
}

#[test]
fn the_default_table_loads() {
    RuleTable::from_json(&valid_json(), "rules.json").unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn any_text(text in "\\PC{0,200}") {
        check(&text);
    }

    #[test]
    fn valid_table_with_one_byte_changed(pos in any::<prop::sample::Index>(), byte in any::<u8>()) {
        let mut bytes = valid_json().into_bytes();
        let k = pos.index(bytes.len());
        bytes[k] = byte;
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn valid_table_with_a_number_replaced(pos in any::<prop::sample::Index>(),
                                          value in prop_oneof![Just("-1".to_string()), Just("1e999".to_string()),
                                                               Just("18446744073709551616".to_string()),
                                                               Just("0".to_string()), any::<u64>().prop_map(|v| v.to_string())]) {
        let text = valid_json();
        let digits: Vec<usize> = text.char_indices().filter(|(_, c)| c.is_ascii_digit()).map(|(i, _)| i).collect();
        let at = digits[pos.index(digits.len())];
        let end = text[at..].find(|c: char| !c.is_ascii_digit()).map_or(text.len(), |e| at + e);
        check(&format!("{}{}{}", &text[..at], value, &text[end..]));
    }
}
