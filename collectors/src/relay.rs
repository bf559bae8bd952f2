//! Relaying the in-process agents' data (`memscope_agent`, relay mode): each agent drops
//! `wire::AgentFile`s into the agent folder; the collector folds them into its next batch and
//! deletes them only once that batch is in the spool, so agent data gets the collector's
//! no-loss shipping. A file that cannot be parsed is moved aside (`*.bad`), never retried forever.
//!
//! Joining by pid: an agent reports the pid it sees; inside a container that is not the host pid
//! NVML reports. [`host_pid`] maps it through `/proc/<pid>/status` (`NSpid`) and checks the
//! process start time, so agent samples and NVML's per-process readings name the same process.

use std::path::{Path, PathBuf};

/// Agent data taken from the folder, and the files to delete once it is spooled.
#[derive(Debug, Default)]
pub struct Taken {
    pub files: Vec<PathBuf>,
    pub allocator: Vec<wire::AllocatorSample>,
    pub events: Vec<wire::Event>,
    pub dropped_samples: u64,
}

#[derive(Debug, Clone)]
pub struct Relay {
    dir: PathBuf,
    proc_root: PathBuf,
}

impl Relay {
    pub fn new(dir: &Path) -> Relay {
        Relay {
            dir: dir.to_path_buf(),
            proc_root: PathBuf::from("/proc"),
        }
    }

    /// Reads `/proc` from elsewhere (tests).
    pub fn with_proc_root(mut self, root: &Path) -> Relay {
        self.proc_root = root.to_path_buf();
        self
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes every finished agent file (in name order: per agent, oldest first), mapping pids to
    /// the host's with `nvml_pids` (the processes NVML lists now).
    pub fn take(&self, nvml_pids: &[u32]) -> Taken {
        let mut out = Taken::default();
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return out;
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        for path in paths {
            let parsed = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice::<wire::AgentFile>(&b).ok());
            let Some(f) = parsed else {
                let _ = std::fs::rename(&path, path.with_extension("bad"));
                continue;
            };
            let pid = host_pid(f.pid, f.start_time_ms, nvml_pids, &self.proc_root);
            out.allocator.extend(f.allocator.into_iter().map(|mut a| {
                a.pid = pid;
                a
            }));
            out.events.extend(f.events.into_iter().map(|mut e| {
                e.pid = Some(pid);
                e
            }));
            out.dropped_samples += f.dropped_samples;
            out.files.push(path);
        }
        out
    }

    /// The taken data is in the spool: forget the files.
    pub fn done(&self, files: &[PathBuf]) {
        for f in files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The host pid of the process an agent calls `pid`: `pid` itself when NVML lists it (same PID
/// namespace), else the NVML process whose innermost `NSpid` is `pid` and whose start time is
/// the agent's; `pid` unchanged when nothing matches.
pub fn host_pid(pid: u32, start_ms: Option<i64>, nvml_pids: &[u32], proc_root: &Path) -> u32 {
    let same_start = |candidate: u32| {
        start_ms.is_none_or(|s| process_start_ms_in(proc_root, candidate) == Some(s))
    };
    if nvml_pids.contains(&pid) && same_start(pid) {
        return pid;
    }
    for &candidate in nvml_pids {
        let Ok(status) = std::fs::read_to_string(proc_root.join(format!("{candidate}/status")))
        else {
            continue;
        };
        let innermost = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|p| p.parse::<u32>().ok());
        if innermost == Some(pid) && same_start(candidate) {
            return candidate;
        }
    }
    pid
}

/// A process's start time in ms since the epoch: boot time (`/proc/stat` btime) plus its start
/// ticks. Deterministic, so the agent (which computes it the same way) and the collector agree.
pub fn process_start_ms_in(proc_root: &Path, pid: u32) -> Option<i64> {
    let stat = std::fs::read_to_string(proc_root.join(format!("{pid}/stat"))).ok()?;
    let start_ticks: i64 = stat
        .rsplit(')')
        .next()?
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()?;
    let btime_s: i64 = std::fs::read_to_string(proc_root.join("stat"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // USER_HZ is 100 on every Linux the collector runs on (it is fixed by the kernel ABI).
    Some(btime_s * 1000 + start_ticks * 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_proc(root: &Path, pid: u32, nspid: &str, start_ticks: u64) {
        let d = root.join(pid.to_string());
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            d.join("status"),
            format!("Name:\tpython\nNSpid:\t{nspid}\n"),
        )
        .unwrap();
        let mut fields = vec!["0"; 30];
        let t = start_ticks.to_string();
        fields[19] = &t;
        std::fs::write(
            d.join("stat"),
            format!("{pid} (py thon) {}", fields.join(" ")),
        )
        .unwrap();
    }

    #[test]
    fn container_pids_map_to_host_pids_by_nspid_and_start_time() {
        let root = std::env::temp_dir().join(format!("memscope-proc-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        std::fs::write(root.join("stat"), "cpu 1 2 3\nbtime 1700000000\n").unwrap();
        fake_proc(&root, 4242, "4242\t7", 500);
        fake_proc(&root, 5000, "5000\t8", 900);
        fake_proc(&root, 8, "8", 123); // same host pid as a container pid: not a GPU process
        let start = Some(1_700_000_000_000 + 500 * 10);
        assert_eq!(process_start_ms_in(&root, 4242), start);
        // Inside a container: pid 7 is host pid 4242.
        assert_eq!(host_pid(7, start, &[5000, 4242], &root), 4242);
        // A reused container pid with another start time does not match.
        assert_eq!(host_pid(8, start, &[5000, 4242], &root), 8);
        // Same namespace: the pid itself.
        assert_eq!(host_pid(4242, start, &[4242], &root), 4242);
        // Not on a GPU (yet): unchanged.
        assert_eq!(host_pid(7, start, &[], &root), 7);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn agent_files_are_taken_in_order_and_bad_ones_moved_aside() {
        let dir = std::env::temp_dir().join(format!("memscope-relay-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = |n: u64| wire::AgentFile {
            version: 1,
            pid: 7,
            start_time_ms: None,
            allocator: vec![wire::AllocatorSample {
                time_ms: n as i64,
                pid: 7,
                start_time_ms: None,
                device: 0,
                gpu_uuid: None,
                step: Some(n),
                allocated_bytes: n,
                reserved_bytes: n,
                active_bytes: None,
                inactive_split_bytes: None,
                requested_bytes: None,
                alloc_retries: None,
                ooms: None,
                segments: None,
                largest_free_block_bytes: None,
            }],
            events: vec![],
            dropped_samples: n,
        };
        for n in [2u64, 1] {
            std::fs::write(
                dir.join(format!("7-0-{n:09}.json")),
                serde_json::to_vec(&file(n)).unwrap(),
            )
            .unwrap();
        }
        std::fs::write(dir.join("7-0-000000003.json"), b"{not json").unwrap();
        std::fs::write(dir.join("7-0-000000004.tmp"), b"half written").unwrap();
        let relay = Relay::new(&dir);
        let taken = relay.take(&[]);
        let steps: Vec<_> = taken.allocator.iter().map(|a| a.step).collect();
        assert_eq!(steps, vec![Some(1), Some(2)]);
        assert_eq!(taken.dropped_samples, 3);
        assert!(dir.join("7-0-000000003.bad").exists());
        relay.done(&taken.files);
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(left.len(), 2, "{left:?}"); // the .bad and the .tmp
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
