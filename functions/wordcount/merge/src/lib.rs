//! Word-count workflow, step 3 (`merge`): joins the `wordcount.km:Counts` regions of all
//! chunks, reads each in place, sums them and returns one `json` region:
//! `{"total": <words>, "distinct": <distinct words>, "counts": {"word": n, ...}}`, keys
//! sorted.

use std::collections::BTreeMap;

use faas_sdk::step::{Context, Region};
use serde::Serialize;

#[allow(dead_code, clippy::all)]
mod wordcount {
    include!(concat!(env!("OUT_DIR"), "/wordcount.rs"));
}

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let messages: Vec<Vec<u8>> = inputs.iter().map(Region::bytes).collect();
    let views = messages.iter().map(|m| wordcount::CountsView::root(m));
    let summary = merge(views)?;
    // Shows up in `faas logs wordcount` with this run's id, and the trace's when the
    // platform exports traces: the line and the run's spans find each other.
    match faas_sdk::trace::trace_id() {
        Some(trace) => {
            faas_sdk::log::info(&format!("merged {} words (trace {trace})", summary.total))
        }
        None => faas_sdk::log::info(&format!("merged {} words", summary.total)),
    }
    let json = serde_json::to_vec(&summary).map_err(|e| e.to_string())?;
    Ok(vec![Region::from_bytes("json", &json)])
}

/// The result document, fields in this order.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    total: u64,
    distinct: usize,
    counts: BTreeMap<&'a str, u64>,
}

/// Sums the chunk counts into the result document.
fn merge<'a>(
    chunks: impl IntoIterator<Item = wordcount::CountsView<'a>>,
) -> Result<Summary<'a>, String> {
    let mut totals: BTreeMap<&str, u64> = BTreeMap::new();
    for chunk in chunks {
        let words = chunk
            .words()
            .to_str()
            .map_err(|e| format!("counts of chunk {} are not UTF-8: {e}", chunk.index()))?;
        let counts = chunk.counts();
        if words.split_terminator('\n').count() != counts.len() {
            return Err(format!(
                "counts of chunk {}: {} words but {} counts",
                chunk.index(),
                words.split_terminator('\n').count(),
                counts.len()
            ));
        }
        for (word, n) in words.split_terminator('\n').zip(counts) {
            *totals.entry(word).or_default() += u64::from(n);
        }
    }
    Ok(Summary {
        total: totals.values().sum(),
        distinct: totals.len(),
        counts: totals,
    })
}

#[cfg(test)]
mod tests {
    use super::{merge, wordcount};

    fn encoded(words: &str, counts: &[u32]) -> Vec<u8> {
        wordcount::Counts {
            index: 0,
            total: counts.iter().map(|&n| u64::from(n)).sum(),
            words: words.to_owned(),
            counts: counts.to_vec(),
        }
        .encode()
        .unwrap()
    }

    #[test]
    fn sums_chunks() {
        let a = encoded("a\nb\n", &[2, 1]);
        let b = encoded("b\nc\n", &[4, 1]);
        let empty = encoded("", &[]);
        let views = [&a, &b, &empty].map(|m| wordcount::CountsView::root(m));
        let json = serde_json::to_string(&merge(views).unwrap()).unwrap();
        assert_eq!(
            json,
            r#"{"total":8,"distinct":3,"counts":{"a":2,"b":5,"c":1}}"#
        );
    }

    #[test]
    fn rejects_mismatched_arrays() {
        let bad = encoded("a\nb\n", &[1]);
        assert!(merge([wordcount::CountsView::root(&bad)]).is_err());
    }
}
