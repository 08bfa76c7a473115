//! Word-count workflow, step 2 (`count`): runs once per chunk (fan-out "each"), reads its
//! `wordcount.km:Chunk` in place and counts the words (whitespace-separated, exact and
//! case-sensitive), returning one `wordcount.km:Counts` region: the distinct words in
//! order, each followed by `\n`, and their counts as a parallel array.

use std::collections::BTreeMap;

use faas_sdk::step::{Context, Region};

#[allow(dead_code, clippy::all)]
mod wordcount {
    include!(concat!(env!("OUT_DIR"), "/wordcount.rs"));
}

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let [input] = inputs.as_slice() else {
        return Err(format!("expected one Chunk region, got {}", inputs.len()));
    };
    let bytes = input.bytes();
    let chunk = wordcount::ChunkView::root(&bytes);
    let text = chunk
        .text()
        .to_str()
        .map_err(|e| format!("chunk {} is not UTF-8: {e}", chunk.index()))?;
    let counts = count(chunk.index(), text);
    let encoded = counts.encode().map_err(|e| e.to_string())?;
    Ok(vec![Region::from_bytes("wordcount.km:Counts", &encoded)])
}

/// The word counts of one chunk's text.
fn count(index: u32, text: &str) -> wordcount::Counts {
    let mut tally: BTreeMap<&str, u32> = BTreeMap::new();
    for word in text.split_whitespace() {
        *tally.entry(word).or_default() += 1;
    }
    let mut out = wordcount::Counts {
        index,
        total: tally.values().map(|&n| u64::from(n)).sum(),
        ..Default::default()
    };
    for (word, n) in tally {
        out.words.push_str(word);
        out.words.push('\n');
        out.counts.push(n);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{count, wordcount};

    #[test]
    fn counts_exactly() {
        let c = count(3, "b a  b\nB\ta b");
        assert_eq!(c.index, 3);
        assert_eq!(c.total, 6);
        assert_eq!(c.words, "B\na\nb\n");
        assert_eq!(c.counts, [1, 2, 3]);
    }

    #[test]
    fn round_trips_through_karmem() {
        let c = count(0, "x y x");
        let bytes = c.encode().unwrap();
        let view = wordcount::CountsView::root(&bytes);
        assert_eq!(view.words(), "x\ny\n");
        assert_eq!(view.counts().to_vec(), [2, 1]);
        assert_eq!(wordcount::Counts::decode(&bytes), c);
    }

    #[test]
    fn empty_chunk() {
        let c = count(0, "  ");
        assert_eq!((c.total, c.words.as_str()), (0, ""));
        assert!(c.counts.is_empty());
    }
}
