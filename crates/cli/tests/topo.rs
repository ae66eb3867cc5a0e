//! `huddle topo` end to end: the acceptance checks and bad input.

mod common;
use common::{huddle, json};

#[test]
fn synthetic_json_reports_the_documented_counts() {
    let v = json(&huddle(&[
        "topo",
        "--synthetic",
        "pack:2 l3:2 core:4 pu:2",
        "--json",
    ]));
    assert_eq!(v["schema"], "huddle.topology/1");
    assert_eq!(v["counts"]["pu"], 32);
    assert_eq!(v["counts"]["core"], 16);
    assert_eq!(v["counts"]["l3"], 4);
    assert_eq!(v["counts"]["package"], 2);
    let pus = v["pus"].as_array().unwrap();
    assert_eq!(pus.len(), 32);
    for key in [
        "os_index",
        "logical_index",
        "core",
        "l1",
        "l2",
        "l3",
        "numa",
        "package",
        "allowed",
    ] {
        assert!(pus[0].get(key).is_some(), "pus[0] lacks {key}");
    }
    assert_eq!(pus[17]["core"], 8);
    assert_eq!(pus[17]["l3"], 2);
    assert_eq!(pus[17]["package"], 1);
}

#[test]
fn this_machine_prints_a_tree() {
    let out = huddle(&["topo"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("this machine:"), "{text}");
    assert!(text.contains("PU L#0 P#"), "{text}");
}

#[test]
fn xml_tree_shows_numa_nodes_and_caches() {
    let shared = std::env::var("HUDDLE_SHARED")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../shared").to_string());
    let file = format!("{shared}/data/topologies/16amd64-4distances.xml");
    let out = huddle(&["topo", "--xml", &file]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("NUMANode L#").count(), 8);
    assert!(text.contains("NUMA distances"));
    let v = json(&huddle(&["topo", "--xml", &file, "--json"]));
    assert_eq!(v["numa_distances"].as_array().unwrap().len(), 8);
}

#[test]
fn locations_resolve_to_os_indexes() {
    let out = huddle(&[
        "topo",
        "--synthetic",
        "pack:2 l3:2 core:4 pu:2",
        "--resolve",
        "package:1.core:0",
    ]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "16,17");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let cases: &[&[&str]] = &[
        &["topo", "--xml", "/dev/null"],
        &["topo", "--xml", "/nonexistent/machine.xml"],
        &["topo", "--xml", "Cargo.toml"],
        &["topo", "--synthetic", "pack:0 pu:2"],
        &["topo", "--synthetic", "pack:100000 core:100000 pu:100000"],
        &["topo", "--synthetic", "pack:2 bogus:2 pu:2"],
        &["topo", "--synthetic", "pack:2 pu:2", "--resolve", "core:99"],
        &["topo", "--synthetic", "pack:2 pu:2", "--costs", "l3=-4"],
    ];
    for args in cases {
        let out = huddle(args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.starts_with("huddle: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
}

#[test]
fn help_explains_each_subcommand() {
    let out = huddle(&["--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("topo"), "{text}");
    let out = huddle(&["topo", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for flag in ["--xml", "--synthetic", "--json", "--resolve", "--costs"] {
        assert!(text.contains(flag), "topo --help lacks {flag}");
    }
    // --help shows each subcommand's long description, -h its one line.
    for (cmd, long) in [
        ("topo", "Show the machine model huddle maps onto"),
        ("detect", "Run CMD with communication detection"),
        ("run", "left out of the mapping"),
        ("attach", "Manage a program that is already running"),
        ("launch", "Run PROG as N ranks"),
    ] {
        let text = String::from_utf8_lossy(&huddle(&[cmd, "--help"]).stdout).to_string();
        assert!(
            text.contains(long),
            "{cmd} --help lacks its long help: {text}"
        );
        let short = String::from_utf8_lossy(&huddle(&[cmd, "-h"]).stdout).to_string();
        assert!(!short.contains(long), "{cmd} -h: {short}");
    }
}

/// hwloc's I/O and libxml2 plugins are skipped while huddle loads this machine (they were half
/// its topology time), and the program huddle starts does not inherit that: its own hwloc (Open
/// MPI's) keeps every plugin. A blacklist the user set is theirs, passed on unchanged.
#[test]
fn unused_hwloc_plugins_are_skipped_and_the_program_keeps_them() {
    let show = "echo \"blacklist=${HWLOC_PLUGINS_BLACKLIST-unset}\"";
    let run = |user_blacklist: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_huddle"));
        cmd.args(["run", "--quiet", "--", "sh", "-c", show])
            .env("HWLOC_PLUGINS_VERBOSE", "1")
            .env_remove("HWLOC_PLUGINS_BLACKLIST");
        if let Some(b) = user_blacklist {
            cmd.env("HWLOC_PLUGINS_BLACKLIST", b);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let hwloc_said = String::from_utf8_lossy(&out.stderr).to_string();
        (
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            hwloc_said.contains("/hwloc_pci'"),
            hwloc_said.contains("`hwloc_pci' is blacklisted"),
        )
    };
    let (child_env, pci_installed, pci_skipped) = run(None);
    assert_eq!(child_env, "blacklist=unset");
    // Debian's hwloc recommends libhwloc-plugins; without it there is nothing to skip.
    assert_eq!(pci_skipped, pci_installed);
    let (child_env, _, pci_skipped) = run(Some("hwloc_gl"));
    assert_eq!(child_env, "blacklist=hwloc_gl");
    assert!(!pci_skipped, "the user's blacklist names only hwloc_gl");
}

/// hwloc's x86 (CPUID) component is left out of huddle's own load: it binds huddle's thread to
/// every PU in turn for attributes the model never reads. The model is the same without it.
#[test]
fn the_cpuid_component_is_not_used_and_the_model_is_the_same() {
    let topo = |verbose: bool| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_huddle"));
        cmd.args(["topo", "--json"]).env_remove("HWLOC_COMPONENTS");
        if verbose {
            cmd.env("HWLOC_COMPONENTS_VERBOSE", "1");
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        (
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (json, hwloc_said) = topo(true);
    let enabled = hwloc_said
        .lines()
        .find(|l| l.contains("Final list of enabled discovery components"))
        .unwrap_or_else(|| panic!("hwloc did not list its components: {hwloc_said}"));
    assert!(enabled.contains("linux("), "{enabled}");
    assert!(!enabled.contains("x86("), "{enabled}");
    // hwloc's own tool keeps x86: its export of this machine, loaded by huddle, gives the same
    // counts and PUs.
    let xml = std::env::temp_dir().join(format!("huddle-topo-x86-{}.xml", std::process::id()));
    let lstopo = std::process::Command::new("lstopo-no-graphics")
        .args(["--of", "xml", "-f"])
        .arg(&xml)
        .output();
    if lstopo.is_ok_and(|o| o.status.success()) {
        let from_xml = std::process::Command::new(env!("CARGO_BIN_EXE_huddle"))
            .args(["topo", "--json", "--xml"])
            .arg(&xml)
            .output()
            .unwrap();
        let _ = std::fs::remove_file(&xml);
        let parse = |s: &[u8]| serde_json::from_slice::<serde_json::Value>(s).unwrap();
        let (system, exported) = (parse(json.as_bytes()), parse(&from_xml.stdout));
        assert_eq!(system["counts"], exported["counts"]);
        assert_eq!(system["pus"], exported["pus"]);
    }
    assert_eq!(topo(false).0, json);
}
