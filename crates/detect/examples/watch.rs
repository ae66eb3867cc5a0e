//! `watch AGENT.so -- CMD ARGS`: runs CMD under detection, prints tasks and the matrix.
use detect::{AgentConfig, Config, Session, Target};
use std::time::Duration;

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let agent = a[0].clone();
    let mut cfg = Config::default();
    if agent != "none" {
        cfg.agent = Some(AgentConfig {
            library: agent.into(),
            rearm_rate: 0.01,
            rearm_floor: detect::DEFAULT_REARM_FLOOR,
            steady_floor: detect::DEFAULT_STEADY_FLOOR,
            interval_ms: 10,
            private_memory: true,
            threads_only: false,
        });
    }
    let mut s = Session::start(
        Target::Spawn {
            program: a[2].clone().into(),
            args: a[3..].iter().map(Into::into).collect(),
        },
        &cfg,
    )
    .expect("start");
    for st in s.sources() {
        eprintln!("source {}: {} ({})", st.name, st.active, st.note);
    }
    let exit = loop {
        s.wait(Duration::from_millis(50));
        s.poll();
        if let Some(e) = s.try_wait() {
            break e;
        }
    };
    s.poll();
    for (i, t) in s.tasks().iter().enumerate() {
        eprintln!("{i}: {t:?}");
    }
    let rows = s.active_tasks(0.1);
    eprintln!("rows {rows:?}");
    print!("{}", s.matrix_of(&rows).to_csv());
    eprintln!("{:?}\n{:?}\nexit {exit:?}", s.stats(), s.agent_notes());
}
