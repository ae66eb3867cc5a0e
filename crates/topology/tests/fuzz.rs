//! Fuzzing the location and level-cost parsers (bounded: proptest's cases, run by `make
//! test`): any text gives PU indexes of the machine or a one-line error; never a panic.

use proptest::prelude::*;
use topology::parse_location;
use topology::{LevelCosts, Machine};

fn machine() -> Machine {
    Machine::from_synthetic("pack:2 l3:2 core:2 pu:2").expect("hwloc synthetic machine")
}

fn one_line(msg: String) {
    assert!(!msg.contains('\n'), "one line: {msg:?}");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn locations_from_any_text(text in "\\PC{0,80}") {
        let m = machine();
        match parse_location(&m, &text) {
            Ok(pus) => prop_assert!(pus.iter().all(|&p| p.0 < m.num_pus())),
            Err(e) => one_line(e.to_string()),
        }
    }

    #[test]
    fn locations_from_location_like_text(text in "(~?(pack|package|socket|l3|core|pu|numa|node|all)?[:.]?[0-9\\-,]{0,12}[ ;]?){1,4}") {
        let m = machine();
        match parse_location(&m, &text) {
            Ok(pus) => {
                prop_assert!(pus.iter().all(|&p| p.0 < m.num_pus()));
                prop_assert!(pus.windows(2).all(|w| w[0] < w[1]), "sorted, no duplicates");
            }
            Err(e) => one_line(e.to_string()),
        }
    }

    #[test]
    fn level_costs_from_any_text(text in "(\\PC{0,40}|([a-z0-9]{0,8}=[0-9eE.+\\-NaInf]{0,8},?){0,6})") {
        match LevelCosts::parse(&text) {
            Ok(c) => {
                let all: Vec<f64> = topology::Level::ALL.into_iter().map(|l| c.get(l)).collect();
                prop_assert!(all.iter().all(|v| v.is_finite() && *v >= 0.0));
                prop_assert!(all.windows(2).all(|w| w[0] <= w[1]));
            }
            Err(e) => one_line(e.to_string()),
        }
    }
}
