//! Will it fit, asked from the command line (`memscope predict`) or over HTTP
//! (`GET /api/predict`): the setting, the limit (bytes, or a GPU's total) and the sizes in the
//! asker's words, the engine's answer ([`snapshot::analysis::whatif::predict`]) as an `api` type.

use snapshot::analysis::whatif::allocator::Limit;
use snapshot::analysis::whatif::predict::Recording;

/// What is asked beside the recordings.
pub struct Ask {
    pub sizes: Vec<u64>,
    /// Search for the largest size that fits even when sizes are asked (always without).
    pub search: bool,
    pub limit_bytes: Option<u64>,
    /// What `limit_bytes` is (`fraction`: the allowance of `set_per_process_memory_fraction`).
    pub kind: api::LimitKind,
    /// A GPU whose total memory is the limit: the first known model whose name holds it.
    pub gpu: Option<String>,
    pub alloc_conf: String,
}

/// The answer, or why there is none, in words a user can act on.
pub fn answer(recordings: &[Recording], ask: &Ask) -> Result<api::PredictAnswer, String> {
    let conf = snapshot::analysis::whatif::conf::AllocConf::parse(&ask.alloc_conf)
        .map_err(|e| format!("alloc_conf: {e}"))?;
    let gpu_bytes = match &ask.gpu {
        None => None,
        Some(name) => Some(
            snapshot::gpus::KNOWN
                .iter()
                .find(|g| g.name.to_lowercase().contains(&name.to_lowercase()))
                .ok_or_else(|| format!("no known GPU is called {name:?}"))?
                .total_bytes,
        ),
    };
    let limit = ask.limit_bytes.or(gpu_bytes).map(|bytes| Limit {
        bytes,
        kind: crate::convert::engine_limit_kind(ask.kind),
    });
    let sizes: Vec<f64> = ask.sizes.iter().map(|&s| s as f64).collect();
    let a =
        snapshot::analysis::whatif::predict::answer(recordings, &sizes, ask.search, &conf, limit)
            .map_err(|e| e.to_string())?;
    let largest = recordings.get(a.largest).map(|r| (r.snap, r.index));
    Ok(crate::convert::predict(
        a,
        largest,
        &ask.alloc_conf,
        limit.map(|l| l.bytes),
    ))
}
