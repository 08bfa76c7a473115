//! Word-count workflow, step 1 (`split`): takes the request body as one `text` region and
//! cuts it into at most `chunks` pieces (config, default 4), one `wordcount.km:Chunk`
//! region each. Cuts fall only at word starts, so no word is split; the words are shared
//! out evenly, and the chunks put together give back the whole text. There are fewer
//! chunks than asked when there are fewer words, and always at least one (maybe empty).

use faas_sdk::step::{Context, Region};

#[allow(dead_code, clippy::all)]
mod wordcount {
    include!(concat!(env!("OUT_DIR"), "/wordcount.rs"));
}

/// Chunks made when the function's config does not say `chunks`.
const DEFAULT_CHUNKS: usize = 4;

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let chunks = match faas_sdk::config::get("chunks") {
        None => DEFAULT_CHUNKS,
        Some(n) => match n.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "config `chunks` must be a positive integer, not {n:?}"
                ));
            }
        },
    };
    let [input] = inputs.as_slice() else {
        return Err(format!("expected one text region, got {}", inputs.len()));
    };
    let text = String::from_utf8(input.bytes()).map_err(|e| format!("input is not UTF-8: {e}"))?;
    split(&text, chunks)
        .into_iter()
        .enumerate()
        .map(|(index, piece)| {
            let chunk = wordcount::Chunk {
                index: index as u32,
                text: piece.to_owned(),
            };
            let bytes = chunk.encode().map_err(|e| e.to_string())?;
            Ok(Region::from_bytes("wordcount.km:Chunk", &bytes))
        })
        .collect()
}

/// Cuts `text` into at most `max` consecutive pieces (at least one) whose concatenation is
/// `text`. Each piece but the first starts at a word, and the words are shared out evenly.
fn split(text: &str, max: usize) -> Vec<&str> {
    // Byte offsets where a word (a maximal run of non-whitespace) starts.
    let mut starts = Vec::new();
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        let word_char = !c.is_whitespace();
        if word_char && !in_word {
            starts.push(i);
        }
        in_word = word_char;
    }
    let pieces = max.min(starts.len()).max(1);
    // Piece k starts at word k * words / pieces; the first piece starts at 0.
    let mut bounds: Vec<usize> = (1..pieces)
        .map(|k| starts[k * starts.len() / pieces])
        .collect();
    bounds.insert(0, 0);
    bounds.push(text.len());
    bounds.windows(2).map(|w| &text[w[0]..w[1]]).collect()
}

#[cfg(test)]
mod tests {
    use super::split;

    fn words(pieces: &[&str]) -> Vec<String> {
        pieces
            .iter()
            .flat_map(|p| p.split_whitespace().map(str::to_owned))
            .collect()
    }

    #[test]
    fn keeps_every_word_whole() {
        let text = "  the quick\tbrown fox\n jumps over the lazy dög  ";
        for max in 1..12 {
            let pieces = split(text, max);
            assert_eq!(pieces.concat(), text);
            assert_eq!(pieces.len(), max.min(9));
            assert_eq!(words(&pieces), words(&[text]));
            assert!(pieces.iter().all(|p| p.split_whitespace().next().is_some()));
        }
    }

    #[test]
    fn shares_words_evenly() {
        let pieces = split("a b c d e f g h i j", 4);
        let sizes: Vec<usize> = pieces
            .iter()
            .map(|p| p.split_whitespace().count())
            .collect();
        assert_eq!(sizes, [2, 3, 2, 3]);
    }

    #[test]
    fn at_least_one_chunk() {
        assert_eq!(split("", 4), [""]);
        assert_eq!(split("   \n", 4), ["   \n"]);
        assert_eq!(split("one", 4), ["one"]);
    }
}
