//! Node reports carried to the launch node through the MPI launcher's stderr, for clusters
//! whose nodes share no file system (docs/cluster.md).
//!
//! `huddle run --node-managers --report DIR` puts a marker file with a random token into DIR
//! and the token into the ranks' environment. A node that does not find that marker at DIR has
//! its node manager write into a node-local directory; at MPI_Finalize one rank of the node (the
//! PMPI agent, mpi/pmpi/huddle_pmpi.c) writes the report's files to its stderr as framed lines,
//! which mpirun (orted) or srun (slurmstepd) forward to the launch node like any rank output.
//! There `huddle run` reads the launcher's stderr through a pipe: [`Relay`] passes every other
//! byte on unchanged and in order, and hands the framed lines to a [`Collector`], which
//! rebuilds the files under DIR. One frame a line:
//!
//! ```text
//! @huddle-node TOKEN start node-HOST                     this node's report will come this way
//! @huddle-node TOKEN data PATH SEQ BASE64                chunk SEQ (0, 1, ...) of file PATH
//! @huddle-node TOKEN file PATH SIZE FNV1A64 CHUNKS       the end of PATH: its size, hash, chunks
//! @huddle-node TOKEN done node-HOST FILES MANAGER MS     the node handed FILES files over
//! ```
//!
//! PATH is `node-HOST/NAME` or `rank-matrix.csv`; MANAGER is what the rank saw of its node
//! manager: `done`, `failed`, `running` (still busy when the rank stopped waiting), `gone`
//! (dead without finishing) or `none` (it never wrote node.json); MS how long the rank waited
//! for it, in milliseconds. A line may carry a
//! launcher's tag before the marker (`mpirun --tag-output`, `srun -l`).

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What starts every frame (then a space, the job's token and a space).
pub const MARKER: &str = "@huddle-node";
/// The environment variable that carries the token to the ranks.
pub const TOKEN_VAR: &str = "HUDDLE_NODE_TOKEN";
/// The largest file rebuilt; a bigger one is counted as lost (memory stays bounded).
pub const MAX_FILE: usize = 64 << 20;
/// Raw bytes per data frame: 768 characters of base64, a line under 1 KiB with its header
/// (srun cut 3-KiB lines into pieces mixed with other nodes' output).
pub const CHUNK: usize = 576;
/// A partial line held back because it may become a frame is let go as plain output past
/// this length (frames are shorter).
const HOLD_MAX: usize = 16 << 10;

/// A fresh random token: 16 hex digits from the kernel's random source.
pub fn new_token() -> std::io::Result<String> {
    let mut b = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// The marker file's name in the report directory.
pub fn launch_marker(token: &str) -> String {
    format!(".huddle-launch-{token}")
}

/// FNV-1a, 64 bits: a checksum the C side computes in a few lines (not a defence against
/// forgery: the lines come from the job's own ranks).
pub fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64_encode(data: &[u8]) -> String {
    let mut s = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= c.len() {
                s.push(B64[(n >> shift) as usize & 63] as char);
            } else {
                s.push('=');
            }
        }
    }
    s
}

/// Standard base64 with padding; None for anything else.
pub fn base64_decode(text: &[u8]) -> Option<Vec<u8>> {
    if text.len() & 3 != 0 {
        return None;
    }
    let val = |c: u8| B64.iter().position(|&x| x == c).map(|v| v as u32);
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let quads = text.len() / 4;
    for (q, c) in text.chunks(4).enumerate() {
        let pad = c.iter().rev().take_while(|&&x| x == b'=').count();
        if pad > 2 || (pad > 0 && q + 1 != quads) {
            return None;
        }
        let mut n = 0u32;
        for &x in &c[..4 - pad] {
            n = (n << 6) | val(x)?;
        }
        n <<= 6 * pad as u32;
        let bytes = [(n >> 16) as u8, (n >> 8) as u8, n as u8];
        out.extend_from_slice(&bytes[..3 - pad]);
    }
    Some(out)
}

/// One framed line, decoded.
#[derive(Clone, Debug, PartialEq)]
pub enum Frame {
    Start {
        node: String,
    },
    Data {
        path: String,
        seq: u64,
        bytes: Vec<u8>,
    },
    File {
        path: String,
        size: u64,
        hash: u64,
        chunks: u64,
    },
    Done {
        node: String,
        files: u64,
        manager: String,
        waited_ms: u64,
    },
}

/// A file-name part the frames may name: [A-Za-z0-9._-], not starting with a dot.
fn plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
}

/// `node-HOST`, with HOST as the agent writes it into file names.
fn node_name(s: &str) -> bool {
    s.strip_prefix("node-")
        .is_some_and(|h| !h.is_empty() && h != "." && h != "..")
        && plain_name(s)
}

/// The node a path belongs to (`node-HOST/NAME`), or None for the job's `rank-matrix.csv`;
/// an error for any other path.
fn split_path(path: &str) -> Result<Option<&str>, String> {
    if path == "rank-matrix.csv" {
        return Ok(None);
    }
    match path.split_once('/') {
        Some((node, name)) if node_name(node) && plain_name(name) => Ok(Some(node)),
        _ => Err(format!("path '{path}' is no node file")),
    }
}

/// Decodes the text after `@huddle-node TOKEN `.
pub fn parse(text: &[u8]) -> Result<Frame, String> {
    let text = std::str::from_utf8(text).map_err(|_| "not UTF-8".to_string())?;
    let words: Vec<&str> = text.split(' ').collect();
    let num = |s: &str, what: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("{what} '{s}' is no number"))
    };
    let node = |s: &str| {
        if node_name(s) {
            Ok(s.to_string())
        } else {
            Err(format!("'{s}' is no node directory name"))
        }
    };
    match words.as_slice() {
        ["start", n] => Ok(Frame::Start { node: node(n)? }),
        ["data", path, seq, b64] => {
            split_path(path)?;
            Ok(Frame::Data {
                path: path.to_string(),
                seq: num(seq, "chunk number")?,
                bytes: base64_decode(b64.as_bytes()).ok_or("bad base64")?,
            })
        }
        ["file", path, size, hash, chunks] => {
            split_path(path)?;
            Ok(Frame::File {
                path: path.to_string(),
                size: num(size, "size")?,
                hash: u64::from_str_radix(hash, 16).map_err(|_| format!("hash '{hash}'"))?,
                chunks: num(chunks, "chunk count")?,
            })
        }
        ["done", n, files, manager, ms] if plain_name(manager) => Ok(Frame::Done {
            node: node(n)?,
            files: num(files, "file count")?,
            manager: manager.to_string(),
            waited_ms: num(ms, "wait")?,
        }),
        _ => Err(format!(
            "unknown frame '{}'",
            text.chars().take(40).collect::<String>()
        )),
    }
}

/// The frames that carry `data` as `path`, as the agent writes them (without newlines).
pub fn encode_file(token: &str, path: &str, data: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = data
        .chunks(CHUNK)
        .enumerate()
        .map(|(i, c)| format!("{MARKER} {token} data {path} {i} {}", base64_encode(c)))
        .collect();
    let chunks = lines.len();
    lines.push(format!(
        "{MARKER} {token} file {path} {} {:016x} {chunks}",
        data.len(),
        fnv1a64(data)
    ));
    lines
}

/// What arrived of one node's report.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeDelivery {
    /// `node-HOST`.
    pub node: String,
    /// Its rank said at start that the report would come this way.
    pub announced: bool,
    /// Files rebuilt under DIR/node-HOST.
    pub files: Vec<String>,
    /// Files that arrived broken or incomplete.
    pub lost: Vec<String>,
    /// The `done` frame: files sent, and the node manager's state as the rank saw it.
    pub handed_over: Option<(u64, String)>,
    /// How long the rank waited for its node manager's report (ms).
    pub waited_ms: Option<u64>,
}

impl NodeDelivery {
    /// As delivery.json has it (`huddle.delivery/1`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "schema": "huddle.delivery/1",
            "node": self.node,
            "via": "launcher stderr",
            "announced": self.announced,
            "handed_over": self.handed_over.is_some(),
            "files_sent": self.handed_over.as_ref().map(|h| h.0),
            "manager": self.handed_over.as_ref().map(|h| h.1.clone()),
            "rank_waited_s": self.waited_ms.map(|ms| ms as f64 / 1000.0),
            "files": self.files,
            "lost": self.lost,
            "complete": self.complete(),
        })
    }

    /// From [`NodeDelivery::to_json`]'s form; None for anything else.
    pub fn from_json(v: &serde_json::Value) -> Option<NodeDelivery> {
        let names = |k: &str| -> Option<Vec<String>> {
            v[k].as_array()?
                .iter()
                .map(|x| x.as_str().map(str::to_string))
                .collect()
        };
        let handed_over = match (v["files_sent"].as_u64(), v["manager"].as_str()) {
            (Some(n), Some(m)) if v["handed_over"] == true => Some((n, m.to_string())),
            _ => None,
        };
        Some(NodeDelivery {
            node: v["node"].as_str()?.to_string(),
            announced: v["announced"].as_bool()?,
            files: names("files")?,
            lost: names("lost")?,
            handed_over,
            waited_ms: v["rank_waited_s"]
                .as_f64()
                .map(|s| (s * 1000.0).round() as u64),
        })
    }

    /// Everything the node sent arrived.
    pub fn complete(&self) -> bool {
        self.lost.is_empty()
            && self
                .handed_over
                .as_ref()
                .is_some_and(|(n, _)| *n as usize == self.files.len())
    }
}

#[derive(Default)]
struct Partial {
    next_seq: u64,
    data: Vec<u8>,
    broken: bool,
}

/// Rebuilds the files of the frames under the report directory.
pub struct Collector {
    dir: PathBuf,
    partial: HashMap<String, Partial>,
    nodes: BTreeMap<String, NodeDelivery>,
    /// The job's files (rank-matrix.csv): name, arrived whole.
    job_files: Vec<(String, bool)>,
    /// Lines of this job that could not be decoded.
    pub bad_lines: usize,
    /// Files that could not be written (path: reason).
    pub write_errors: Vec<String>,
}

impl Collector {
    pub fn new(dir: &Path) -> Collector {
        Collector {
            dir: dir.to_path_buf(),
            partial: HashMap::new(),
            nodes: BTreeMap::new(),
            job_files: Vec::new(),
            bad_lines: 0,
            write_errors: Vec::new(),
        }
    }

    fn node(&mut self, name: &str) -> &mut NodeDelivery {
        self.nodes
            .entry(name.to_string())
            .or_insert_with(|| NodeDelivery {
                node: name.to_string(),
                ..Default::default()
            })
    }

    fn record(&mut self, path: &str, whole: bool) {
        match split_path(path) {
            Ok(Some(node)) => {
                let name = path[node.len() + 1..].to_string();
                let n = self.node(node);
                if whole {
                    n.files.push(name);
                } else {
                    n.lost.push(name);
                }
            }
            _ => self.job_files.push((path.to_string(), whole)),
        }
    }

    /// Takes one frame; a file is written as soon as its end frame says it is whole.
    pub fn take(&mut self, frame: Frame) {
        match frame {
            Frame::Start { node } => self.node(&node).announced = true,
            Frame::Done {
                node,
                files,
                manager,
                waited_ms,
            } => {
                let n = self.node(&node);
                n.handed_over = Some((files, manager));
                n.waited_ms = Some(waited_ms);
            }
            Frame::Data { path, seq, bytes } => {
                let p = self.partial.entry(path).or_default();
                if p.broken || seq != p.next_seq || p.data.len() + bytes.len() > MAX_FILE {
                    p.broken = true;
                    p.data = Vec::new();
                } else {
                    p.data.extend_from_slice(&bytes);
                }
                p.next_seq = seq + 1;
            }
            Frame::File {
                path,
                size,
                hash,
                chunks,
            } => {
                let p = self.partial.remove(&path).unwrap_or_default();
                let whole = !p.broken
                    && p.next_seq == chunks
                    && p.data.len() as u64 == size
                    && fnv1a64(&p.data) == hash;
                let written = whole && self.write(&path, &p.data);
                self.record(&path, written);
            }
        }
    }

    /// Writes DIR/PATH atomically (temporary file, then rename); false after noting why not.
    fn write(&mut self, path: &str, data: &[u8]) -> bool {
        use std::os::unix::fs::DirBuilderExt;
        let target = self.dir.join(path);
        let tmp = target.with_extension(format!("relay-tmp{}", std::process::id()));
        let result = target
            .parent()
            .map_or(Ok(()), |d| {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(d)
            })
            .and_then(|()| std::fs::write(&tmp, data))
            .and_then(|()| std::fs::rename(&tmp, &target));
        if let Err(e) = result {
            let _ = std::fs::remove_file(&tmp);
            self.write_errors.push(format!("{}: {e}", target.display()));
            return false;
        }
        true
    }

    /// Ends the collection: files whose end never came are lost; writes each node's
    /// `delivery.json` (how its report arrived) and gives every node's account, and the job's
    /// files (name, arrived whole).
    pub fn finish(mut self) -> (Vec<NodeDelivery>, Vec<(String, bool)>) {
        let mut open: Vec<String> = self.partial.drain().map(|(p, _)| p).collect();
        open.sort();
        for path in open {
            self.record(&path, false);
        }
        let nodes: Vec<NodeDelivery> = std::mem::take(&mut self.nodes).into_values().collect();
        for n in &nodes {
            let text = serde_json::to_string_pretty(&n.to_json()).unwrap_or_default() + "\n";
            self.write(&format!("{}/delivery.json", n.node), text.as_bytes());
        }
        (nodes, self.job_files)
    }
}

/// Whether `prefix`, the text before a frame on its line, is only a launcher's tag:
/// Open MPI's `--tag-output` (`[1,3]<stderr>:`) and `--timestamp-output` (`Thu Nov 26
/// 13:00:18 2026<stderr>:`), or srun's `-l` (`3: `).
fn is_tag(prefix: &[u8]) -> bool {
    let t = prefix.trim_ascii();
    t.is_empty()
        || t.ends_with(b"<stderr>:")
        || t.ends_with(b"<stdout>:")
        || (t.len() > 1 && t.ends_with(b":") && t[..t.len() - 1].iter().all(u8::is_ascii_digit))
}

/// Whether `p`, the start of a line, may still grow into a launcher's tag (then it is held
/// back with the frame that may follow, rather than printed alone).
fn tag_prefix(p: &[u8]) -> bool {
    let digits = |s: &[u8]| s.iter().take_while(|b| b.is_ascii_digit()).count();
    // srun -l: "  3: "
    let t = p.trim_ascii_start();
    let d = digits(t);
    let r = &t[d..];
    if r.is_empty() || (d > 0 && (r == b":" || r == b": ")) {
        return true;
    }
    // Open MPI --tag-output: "[1,3]<stderr>:"
    let Some(r) = p.strip_prefix(b"[") else {
        return false;
    };
    let d1 = digits(r);
    let r = &r[d1..];
    if r.is_empty() {
        return true;
    }
    if d1 == 0 || r[0] != b',' {
        return false;
    }
    let r = &r[1..];
    let d2 = digits(r);
    let r = &r[d2..];
    r.is_empty() || (d2 > 0 && (b"]<stderr>:".starts_with(r) || b"]<stdout>:".starts_with(r)))
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Splits the launcher's stderr into the job's own output, passed on unchanged, and this
/// job's frames, handed to the collector.
pub struct Relay {
    needle: Vec<u8>,
    pending: Vec<u8>,
    /// `pending` starts at the beginning of a line (nothing of that line went out yet).
    line_start: bool,
    pub collector: Collector,
}

impl Relay {
    pub fn new(token: &str, collector: Collector) -> Relay {
        Relay {
            needle: format!("{MARKER} {token} ").into_bytes(),
            pending: Vec::new(),
            line_start: true,
            collector,
        }
    }

    /// From where the partial line `p` must be held back: the start of a frame in it, or of
    /// a tail that may grow into one; everything before can go out now.
    fn hold_from(&self, p: &[u8]) -> usize {
        if p.len() > HOLD_MAX {
            return p.len();
        }
        let at = find(p, &self.needle).unwrap_or_else(|| {
            (1..self.needle.len().min(p.len() + 1))
                .rev()
                .find(|&k| p.ends_with(&self.needle[..k]))
                .map_or(p.len(), |k| p.len() - k)
        });
        // A launcher's tag before it stays with the frame.
        if self.line_start && tag_prefix(&p[..at]) {
            0
        } else {
            at
        }
    }

    /// Takes bytes read from the launcher's stderr; writes what is output to `out` at once.
    pub fn feed(&mut self, chunk: &[u8], out: &mut dyn Write) {
        self.pending.extend_from_slice(chunk);
        let mut emit: Vec<u8> = Vec::with_capacity(self.pending.len());
        let mut start = 0;
        while let Some(nl) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let line = &self.pending[start..start + nl + 1];
            start += nl + 1;
            match find(line, &self.needle) {
                Some(at) => {
                    let prefix = &line[..at];
                    if !is_tag(prefix) {
                        emit.extend_from_slice(prefix);
                        emit.push(b'\n');
                    }
                    let body = line[at + self.needle.len()..].trim_ascii_end();
                    match parse(body) {
                        Ok(f) => self.collector.take(f),
                        Err(_) => self.collector.bad_lines += 1,
                    }
                }
                None => emit.extend_from_slice(line),
            }
        }
        self.pending.drain(..start);
        if start > 0 {
            self.line_start = true;
        }
        let keep = self.hold_from(&self.pending);
        if keep > 0 {
            self.line_start = false;
        }
        emit.extend(self.pending.drain(..keep));
        if !emit.is_empty() {
            // The job's output goes on even where huddle's own stderr is gone.
            let _ = out.write_all(&emit);
            let _ = out.flush();
        }
    }

    /// The stream ended: a last line without its newline is output.
    pub fn end(&mut self, out: &mut dyn Write) {
        if !self.pending.is_empty() {
            let _ = out.write_all(&self.pending);
            let _ = out.flush();
            self.pending.clear();
        }
        self.line_start = true;
    }
}

/// Reads `input` to its end through `relay`; output goes to `out`.
pub fn pump(mut input: impl Read, out: &mut dyn Write, relay: &mut Relay) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => relay.feed(&buf[..n], out),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    relay.end(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("relay-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn base64_round_trips_and_refuses_garbage() {
        for n in 0..40 {
            let data: Vec<u8> = (0..n).map(|i| (i * 37 + 11) as u8).collect();
            let e = base64_encode(&data);
            assert_eq!(base64_decode(e.as_bytes()).as_deref(), Some(&data[..]));
        }
        assert_eq!(base64_encode(b"foob"), "Zm9vYg==");
        assert_eq!(base64_decode(b"Zm9vYmFy").unwrap(), b"foobar");
        for bad in [&b"Zm9"[..], b"Zm9v!mFy", b"Z===", b"Zg==Zm9v"] {
            assert_eq!(base64_decode(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fnv_matches_its_reference_values() {
        assert_eq!(fnv1a64(b""), 0xcbf29ce484222325);
        assert_eq!(fnv1a64(b"a"), 0xaf63dc4c8601ec8c);
    }

    #[test]
    fn frames_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse(b"start node-hA").unwrap(),
            Frame::Start {
                node: "node-hA".into()
            }
        );
        assert_eq!(
            parse(b"done node-hA 3 gone 120").unwrap(),
            Frame::Done {
                node: "node-hA".into(),
                files: 3,
                manager: "gone".into(),
                waited_ms: 120
            }
        );
        for bad in [
            &b"data ../etc/passwd 0 AAAA"[..],
            b"data node-hA/../x 0 AAAA",
            b"data node-hA/.hidden 0 AAAA",
            b"data node-hA/sub/x 0 AAAA",
            b"data other/x 0 AAAA",
            b"file node-hA/x 1 zz 1",
            b"start hA",
            b"start node-..",
            b"data node-hA/x one AAAA",
            b"what",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    /// Output of a launcher: the job's lines, tagged frames and frames split across reads.
    #[test]
    fn relay_passes_output_through_and_rebuilds_files() {
        let dir = scratch("relay");
        let token = "0123456789abcdef";
        let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut stream: Vec<u8> = Vec::new();
        let mut want: Vec<u8> = Vec::new();
        stream.extend(format!("{MARKER} {token} start node-hA\n").bytes());
        for (i, l) in encode_file(token, "node-hA/node.json", b"{\"state\": \"done\"}\n")
            .iter()
            .enumerate()
        {
            let text = format!("job line {i}\n");
            stream.extend(text.bytes());
            want.extend(text.bytes());
            let tag = if i % 2 == 0 {
                "[1,3]<stderr>:"
            } else {
                "  3: "
            };
            stream.extend(format!("{tag}{l}\n").bytes());
        }
        for l in encode_file(token, "node-hA/matrix.csv", &big) {
            stream.extend(format!("{l}\n").bytes());
        }
        // Another job's frame and a near miss are output, untouched.
        for text in [
            format!("{MARKER} ffffffffffffffff start node-hA\n"),
            "@huddle-nod and more\n".to_string(),
        ] {
            stream.extend(text.bytes());
            want.extend(text.bytes());
        }
        for l in encode_file(token, "rank-matrix.csv", b"0,1\n1,0\n") {
            stream.extend(format!("{l}\n").bytes());
        }
        stream.extend(format!("{MARKER} {token} done node-hA 2 done 40\n").bytes());
        stream.extend(b"no newline at the end");
        want.extend(b"no newline at the end");
        // Every split of the stream into two reads, and reads of 7 bytes.
        let mut cuts: Vec<Vec<usize>> = (0..stream.len()).step_by(97).map(|c| vec![c]).collect();
        cuts.push((0..stream.len()).step_by(7).collect());
        for cut in cuts {
            let mut relay = Relay::new(token, Collector::new(&dir));
            let mut out: Vec<u8> = Vec::new();
            let mut at = 0;
            for &c in cut.iter().chain([stream.len()].iter()) {
                relay.feed(&stream[at..c.max(at)], &mut out);
                at = c.max(at);
            }
            relay.end(&mut out);
            assert_eq!(
                String::from_utf8_lossy(&out),
                String::from_utf8_lossy(&want)
            );
            assert_eq!(relay.collector.bad_lines, 0);
            let (nodes, job) = relay.collector.finish();
            assert_eq!(nodes.len(), 1);
            assert!(nodes[0].complete(), "{:?}", nodes[0]);
            assert!(nodes[0].announced);
            assert_eq!(job, vec![("rank-matrix.csv".to_string(), true)]);
        }
        assert_eq!(std::fs::read(dir.join("node-hA/matrix.csv")).unwrap(), big);
        assert_eq!(
            std::fs::read_to_string(dir.join("rank-matrix.csv")).unwrap(),
            "0,1\n1,0\n"
        );
        let d: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("node-hA/delivery.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(d["complete"], true);
        assert_eq!(d["via"], "launcher stderr");
        let back = NodeDelivery::from_json(&d).unwrap();
        assert_eq!(back.handed_over, Some((2, "done".to_string())));
        assert_eq!((back.waited_ms, back.files.len()), (Some(40), 2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A time stamp cannot be told from output until its end: it is taken with its frame
    /// when the launcher's write of the line comes in one read (as Open MPI writes it).
    #[test]
    fn time_stamp_tags_go_with_their_frame() {
        let dir = scratch("stamp");
        let mut relay = Relay::new("t", Collector::new(&dir));
        let mut out = Vec::new();
        for l in encode_file("t", "node-hA/x", b"abc") {
            let line = format!("[1,0]Thu Nov 26 13:00:18 2026<stderr>:{l}\n");
            relay.feed(line.as_bytes(), &mut out);
        }
        relay.feed(b"Thu Nov 26 13:00:18 2026<stderr>:job\n", &mut out);
        assert_eq!(out, b"Thu Nov 26 13:00:18 2026<stderr>:job\n");
        assert_eq!(relay.collector.finish().0[0].files, ["x"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn partial_lines_go_out_at_once_unless_they_may_be_frames() {
        let dir = scratch("partial");
        let mut relay = Relay::new("t", Collector::new(&dir));
        let mut out = Vec::new();
        relay.feed(b"progress 10%", &mut out);
        assert_eq!(out, b"progress 10%");
        relay.feed(b" ... @huddle-no", &mut out);
        assert_eq!(out, b"progress 10% ... ");
        relay.feed(b"thing\n", &mut out);
        assert_eq!(out, b"progress 10% ... @huddle-nothing\n");
    }

    #[test]
    fn lost_and_broken_chunks_are_reported_not_written() {
        let dir = scratch("lost");
        let token = "t";
        let data: Vec<u8> = (0..3 * CHUNK).map(|i| i as u8).collect();
        let lines = encode_file(token, "node-hB/tasks.json", &data);
        let mut relay = Relay::new(token, Collector::new(&dir));
        let mut out = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            if i != 1 {
                relay.feed(format!("{l}\n").as_bytes(), &mut out);
            }
        }
        // A frame cut short by another rank's output on the same line.
        relay.feed(
            format!("{MARKER} {token} data node-hB/x 0 QUJD{MARKER} {token} start node-hB\n")
                .as_bytes(),
            &mut out,
        );
        // Data whose end never came.
        relay.feed(
            format!("{MARKER} {token} data node-hB/decisions.json 0 QUJD\n").as_bytes(),
            &mut out,
        );
        assert!(out.is_empty());
        assert_eq!(relay.collector.bad_lines, 1);
        let (nodes, _) = relay.collector.finish();
        assert_eq!(nodes[0].lost, ["tasks.json", "decisions.json"]);
        assert!(!nodes[0].complete());
        assert!(!dir.join("node-hB/tasks.json").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
