//! Work no one waits for, run where it does not slow the work someone does wait for.
//!
//! After an upload is answered, the server writes the snapshot's model file (a cache: 70–110 ms
//! of one core for the 164 MB GPT file). That is exactly when the browser opens the snapshot's
//! page and asks for its first views, and on a 2-core machine the write took a core from them.
//! Such work runs here: on a thread of its own at the lowest CPU priority (nice 19), which still
//! progresses on a busy machine but yields to everything else (bench/README.md, issue 41,
//! thirteenth part). Its own thread, not tokio's blocking pool: an unprivileged thread cannot
//! raise its priority again, and the pool's threads are reused for waited-for work.

use anyhow::Context;

/// Runs `work` on a thread of its own at the lowest CPU priority; its result when done.
pub async fn run<T: Send + 'static>(
    name: &str,
    work: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawn(name, move || {
        let _ = tx.send(work());
    })?;
    rx.await
        .with_context(|| format!("the {name} thread ended without an answer"))
}

/// Starts `work` on a thread of its own at the lowest CPU priority, and does not wait for it.
pub fn spawn(name: &str, work: impl FnOnce() + Send + 'static) -> anyhow::Result<()> {
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || {
            lower_this_threads_priority();
            work();
        })
        .with_context(|| format!("could not start a thread for {name}"))?;
    Ok(())
}

/// This thread's nice value to 19, the lowest priority. On Linux the nice value is the
/// calling thread's (`setpriority(PRIO_PROCESS, 0, …)` names the thread, not the process).
/// A failure leaves the thread as it was: the work still runs, at normal priority.
#[allow(unsafe_code)]
fn lower_this_threads_priority() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `setpriority` takes no pointers; it only sets the calling thread's nice value.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, 19);
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn background_work_runs_at_the_lowest_priority_and_answers() {
        let (value, nice) = super::run("memscope-test", || {
            // The nice value from the thread's own /proc entry: field 19 of its stat.
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap_or_default();
            let nice = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().nth(16))
                .and_then(|n| n.parse::<i32>().ok());
            (42, nice)
        })
        .await
        .unwrap();
        assert_eq!(value, 42);
        if cfg!(all(target_os = "linux", target_env = "gnu")) {
            assert_eq!(nice, Some(19));
        }
    }
}
