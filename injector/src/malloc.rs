//! glibc malloc tuning for the webhook's hot path.
//!
//! An injection builds and drops about a thousand small JSON nodes (serde_json maps, strings, vectors).
//! glibc's per-thread cache (tcache) keeps only 7 free chunks per size class by default, so most of those
//! frees and the next request's allocations go through the slower bins (`_int_malloc`, `_int_free`,
//! `malloc_consolidate`: ~25% of an injection's instructions). A larger cache makes them tcache hits:
//! callgrind, hello pod, per injection 1.00M -> 0.86M instructions; criterion (no LTO, loaded machine)
//! ~213 -> ~116 µs. No allocator crate is needed (the workspace forbids `unsafe`, and a C allocator adds
//! a build dependency); the setting is glibc's documented `GLIBC_TUNABLES`, read at process start, so the
//! process re-executes itself once with it set.
//!
//! Memory: the cache holds at most what a request freed, per thread (a few hundred KiB for typical pods);
//! the count bounds it per size class.

/// The tunables set when the environment has none: up to 1024 cached free chunks per size class.
pub const TUNABLES: &str = "glibc.malloc.tcache_count=1024";

const ENV: &str = "GLIBC_TUNABLES";

/// Re-executes the running program with [`TUNABLES`] in `GLIBC_TUNABLES` when that variable is unset (an
/// operator's value, even empty, wins) on glibc Linux. Returns when nothing was done or the exec failed
/// (the program then simply runs with glibc's defaults). Call it first thing in `main`, before threads.
pub fn reexec_with_tuned_malloc() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os(ENV).is_some() {
            return;
        }
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
        // `exec` only returns on failure; then we carry on untuned rather than fail.
        let _failed = std::process::Command::new(&exe)
            .arg0(arg0)
            .args(args)
            .env(ENV, TUNABLES)
            .exec();
    }
}
