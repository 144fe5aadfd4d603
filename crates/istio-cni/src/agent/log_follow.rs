//! The plugin's log (`<run dir>/istio-cni.log`, one JSON object a line) copied to the agent's standard
//! output, as Istio's agent relays the plugin's log over its UDS log server (`cni/pkg/log/uds.go`), so
//! the plugin's lines show in `kubectl logs` of the agent's pod.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

/// Longest line copied; a longer one is cut and marked, so one runaway line cannot flood the log.
pub const MAX_LINE: usize = 16 * 1024;

/// Where the follower is in the file.
pub struct Follower {
    path: PathBuf,
    offset: u64,
    /// An incomplete last line, kept until its newline arrives.
    partial: Vec<u8>,
}

impl Follower {
    /// Starts at the file's current end: what was logged before the agent started is not repeated.
    pub fn new(path: PathBuf) -> Follower {
        let offset = std::fs::metadata(&path).map_or(0, |m| m.len());
        Follower {
            path,
            offset,
            partial: Vec::new(),
        }
    }

    /// The whole lines added since the last call (each cut at [`MAX_LINE`]); a file that shrank (rotated
    /// or truncated) is read again from its start.
    pub fn poll(&mut self) -> Vec<String> {
        // Never blocks: a FIFO or anything but a regular file in the log's place is not read.
        let Ok(mut file) =
            super::bounded_read::open_regular(&self.path, super::bounded_read::Links::NoFollow)
        else {
            return Vec::new();
        };
        let len = file.metadata().map_or(0, |m| m.len());
        if len < self.offset {
            self.offset = 0;
            self.partial.clear();
        }
        if len == self.offset || file.seek(SeekFrom::Start(self.offset)).is_err() {
            return Vec::new();
        }
        let mut fresh = Vec::new();
        // At most 1 MiB a poll; the rest is read by the next one.
        let read = (&mut file)
            .take(1 << 20)
            .read_to_end(&mut fresh)
            .unwrap_or(0);
        self.offset += read as u64;
        self.partial.extend_from_slice(&fresh[..read]);
        let mut lines = Vec::new();
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            lines.push(bounded(&line[..line.len() - 1]));
        }
        if self.partial.len() > MAX_LINE {
            lines.push(bounded(&self.partial));
            self.partial.clear();
        }
        lines
    }
}

fn bounded(line: &[u8]) -> String {
    if line.len() <= MAX_LINE {
        return String::from_utf8_lossy(line).into_owned();
    }
    format!(
        "{}... ({} bytes cut)",
        String::from_utf8_lossy(&line[..MAX_LINE]),
        line.len() - MAX_LINE
    )
}

/// Copies new lines to standard output as they are written (inotify on the run dir; every
/// `interval` without it), until the task is dropped.
pub async fn run(path: PathBuf, interval: Duration) {
    let target = super::watch::Target {
        dir: path.parent().map(PathBuf::from).unwrap_or_default(),
        names: path.file_name().map(Into::into).into_iter().collect(),
    };
    let mut follower = Follower::new(path);
    let mut watch = None;
    loop {
        // The run dir may not exist before the first install: the watch is tried again each time.
        if watch.is_none() {
            watch = super::watch::Watch::new(std::slice::from_ref(&target))
                .ok()
                .filter(|w| w.watching());
        }
        super::watch::changed_or(watch.as_mut(), interval).await;
        let lines = follower.poll();
        if lines.is_empty() {
            continue;
        }
        let mut out = std::io::stdout().lock();
        for line in lines {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn new_whole_lines_are_read_bounded_and_a_truncation_starts_over() {
        let dir = std::env::temp_dir().join(format!("log-follow-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("istio-cni.log");
        std::fs::write(&path, "before\n").unwrap();
        let mut f = Follower::new(path.clone());
        assert!(f.poll().is_empty());
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        file.write_all(b"{\"msg\":\"a\"}\n{\"msg\":").unwrap();
        assert_eq!(f.poll(), ["{\"msg\":\"a\"}"]);
        file.write_all(b"\"b\"}\n").unwrap();
        assert_eq!(f.poll(), ["{\"msg\":\"b\"}"]);
        let long = "x".repeat(MAX_LINE + 10);
        file.write_all(format!("{long}\n").as_bytes()).unwrap();
        let lines = f.poll();
        assert!(
            lines[0].ends_with("... (10 bytes cut)"),
            "{}",
            &lines[0][MAX_LINE..]
        );
        std::fs::write(&path, "new\n").unwrap();
        assert_eq!(f.poll(), ["new"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
