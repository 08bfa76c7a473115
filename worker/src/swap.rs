//! Whether the machine swaps, watched for as long as the process runs.
//!
//! An instance slot reset by scanning for the pages an event wrote (`engine.rs`) misses
//! a written page the kernel swapped out, so the next instance in that slot, perhaps
//! another tenant's, would read it (bytecodealliance/wasmtime#14357). Slots are
//! therefore scanned only while no swap area is active, and a swap area turned on later
//! must not go unseen: the kernel wakes a `poll` on `/proc/swaps` (`POLLPRI`) at every
//! `swapon` and `swapoff`, so one thread blocked there sees it at once, and costs
//! nothing while nothing changes. From then on a worker whose slots are scanned refuses
//! to start instances, and its process stops, to start again with slots reset in full
//! (`Worker::until_swap_turned_on`).

use std::sync::{Arc, OnceLock};
use tokio::sync::watch;

/// Where the kernel lists the active swap areas.
#[cfg(target_os = "linux")]
const PROC_SWAPS: &str = "/proc/swaps";

/// What this process saw of the machine's swap areas: whether none was active when it
/// first looked, and whether one was turned on since.
pub(crate) struct SwapWatch {
    /// No swap area was active when the watch started, and it is watching.
    off_at_start: bool,
    /// Becomes `true`, for good, once a swap area is turned on after the start (or the
    /// watch can no longer tell).
    turned_on: watch::Sender<bool>,
}

impl SwapWatch {
    /// The process's watch, started on first use; every worker of the process shares
    /// it, since swap is the machine's.
    pub(crate) fn process() -> Arc<Self> {
        static PROCESS: OnceLock<Arc<SwapWatch>> = OnceLock::new();
        PROCESS.get_or_init(|| Arc::new(Self::start())).clone()
    }

    /// A watch that a test turns on itself ([`Self::turn_on`]).
    #[cfg(test)]
    pub(crate) fn detached() -> Self {
        Self {
            off_at_start: true,
            turned_on: watch::Sender::new(false),
        }
    }

    /// Whether slots may be reset by scanning for written pages now: no swap area was
    /// active at the start and none has been turned on since.
    pub(crate) fn scanning_is_safe(&self) -> bool {
        self.off_at_start && !self.turned_on()
    }

    /// Whether a swap area was turned on after the start.
    pub(crate) fn turned_on(&self) -> bool {
        *self.turned_on.borrow()
    }

    /// Returns once a swap area is turned on after the start (at once if one was).
    pub(crate) async fn until_turned_on(&self) {
        let mut turned_on = self.turned_on.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = turned_on.wait_for(|on| *on).await;
    }

    /// Records that a swap area was turned on (or that the watch failed: `why`).
    #[cfg(test)]
    pub(crate) fn turn_on(&self, why: &str) {
        mark_turned_on(&self.turned_on, why);
    }

    /// Looks at the swap areas and, if none is active, keeps watching on a thread of
    /// its own.
    #[cfg(target_os = "linux")]
    fn start() -> Self {
        let turned_on = watch::Sender::new(false);
        // Opened before it is read: the kernel counts changes from the open on, so
        // one made between the read and the first poll still wakes it.
        let off = std::fs::File::open(PROC_SWAPS).and_then(|file| {
            if !no_swap_areas(&read_from_start(&file)?) {
                return Ok(false);
            }
            let turned_on = turned_on.clone();
            std::thread::Builder::new()
                .name("faas-swap-watch".into())
                .spawn(move || {
                    mark_turned_on(&turned_on, &watch_until_turned_on(&file));
                })?;
            Ok(true)
        });
        let off_at_start = off.unwrap_or(false);
        if !off_at_start {
            tracing::warn!(
                "swap is on (or {PROC_SWAPS} unreadable): instance slots are reset in full, \
                 without scanning for the pages an event wrote, which is slower"
            );
        }
        Self {
            off_at_start,
            turned_on,
        }
    }

    /// Elsewhere there is no `PAGEMAP_SCAN`, so nothing is scanned to begin with.
    #[cfg(not(target_os = "linux"))]
    fn start() -> Self {
        Self {
            off_at_start: true,
            turned_on: watch::Sender::new(false),
        }
    }
}

/// Sets `turned_on` and says why, once.
fn mark_turned_on(turned_on: &watch::Sender<bool>, why: &str) {
    if !turned_on.send_replace(true) {
        tracing::error!(
            "{why}: instance slots reset by scanning for the pages an event wrote could \
             hand a swapped-out page to the next instance, so no new instance starts; \
             restart the process to reset slots in full"
        );
    }
}

/// Blocks until a swap area is active in `file` (`/proc/swaps`, opened while none was)
/// and says so, or says why it can no longer tell.
#[cfg(target_os = "linux")]
fn watch_until_turned_on(file: &std::fs::File) -> String {
    use rustix::event::{PollFd, PollFlags, poll};
    loop {
        let mut fds = [PollFd::new(file, PollFlags::PRI)];
        match poll(&mut fds, None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(err) => return format!("could not keep watching {PROC_SWAPS}: {err}"),
        }
        // The kernel reports a change as PRI and ERR together; anything else would wake
        // this loop again at once.
        if !fds[0].revents().intersects(PollFlags::PRI | PollFlags::ERR) {
            return format!(
                "could not keep watching {PROC_SWAPS}: poll returned {:?}",
                fds[0].revents()
            );
        }
        match read_from_start(file) {
            Ok(text) if no_swap_areas(&text) => {}
            Ok(text) => {
                let areas: Vec<&str> = text.lines().skip(1).filter_map(area_name).collect();
                return format!("swap was turned on ({})", areas.join(", "));
            }
            Err(err) => return format!("could not read {PROC_SWAPS} again: {err}"),
        }
    }
}

/// The whole of `file`, read from its start.
#[cfg(target_os = "linux")]
fn read_from_start(mut file: &std::fs::File) -> std::io::Result<String> {
    use std::io::{Read, Seek};
    file.seek(std::io::SeekFrom::Start(0))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// Whether `proc_swaps` (the text of `/proc/swaps`: a header line, then one line per
/// active swap area) lists no swap area.
fn no_swap_areas(proc_swaps: &str) -> bool {
    proc_swaps
        .lines()
        .skip(1)
        .all(|line| line.trim().is_empty())
}

/// The file or device of one line of `/proc/swaps`.
fn area_name(line: &str) -> Option<&str> {
    line.split_whitespace().next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_header_means_no_swap_area() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(no_swap_areas(header));
        assert!(no_swap_areas(""));
        let zram = format!("{header}/dev/zram0  partition\t8388604\t\t0\t\t100\n");
        assert!(!no_swap_areas(&zram));
        assert_eq!(area_name(zram.lines().nth(1).unwrap()), Some("/dev/zram0"));
        let file = format!("{header}/swapfile  file\t2097148\t\t512\t\t-2\n");
        assert!(!no_swap_areas(&file));
    }

    #[tokio::test]
    async fn a_swap_area_turned_on_stays_seen_and_wakes_whoever_waits() {
        let watch = Arc::new(SwapWatch::detached());
        assert!(watch.scanning_is_safe());
        let waiting = tokio::spawn({
            let watch = watch.clone();
            async move { watch.until_turned_on().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        watch.turn_on("swap was turned on (/swapfile)");
        waiting.await.unwrap();
        assert!(watch.turned_on());
        assert!(!watch.scanning_is_safe());
        // Turned on for good: a later waiter returns at once.
        watch.until_turned_on().await;
    }
}
