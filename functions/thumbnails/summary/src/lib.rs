//! Thumbnails workflow, step 3 (`summary`): joins the `image.km:Thumbnail` regions of all
//! resize branches, reads each in place and returns one `json` region:
//! `{"source": {"width": W, "height": H}, "thumbnails": [{"size": s, "width": w,
//! "height": h, "bytes": n, "sha256": "..."}, ...]}`, thumbnails sorted by size.

use faas_sdk::step::{Context, Region};
use serde::Serialize;

#[allow(dead_code, clippy::all)]
mod image {
    include!(concat!(env!("OUT_DIR"), "/image.rs"));
}

#[derive(Debug, Serialize)]
struct Summary {
    source: Source,
    thumbnails: Vec<Thumb>,
}

#[derive(Debug, PartialEq, Serialize)]
struct Source {
    width: u32,
    height: u32,
}

#[derive(Debug, Serialize)]
struct Thumb {
    size: u32,
    width: u32,
    height: u32,
    bytes: usize,
    sha256: String,
}

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let messages: Vec<Vec<u8>> = inputs.iter().map(Region::bytes).collect();
    let summary = summarize(messages.iter().map(|m| image::ThumbnailView::root(m)))?;
    let json = serde_json::to_vec(&summary).map_err(|e| e.to_string())?;
    Ok(vec![Region::from_bytes("json", &json)])
}

/// Describes the thumbnails, which must all come from the same source image.
fn summarize<'a>(
    thumbnails: impl IntoIterator<Item = image::ThumbnailView<'a>>,
) -> Result<Summary, String> {
    let mut source = None;
    let mut thumbs = Vec::new();
    for t in thumbnails {
        let this = Source {
            width: t.source_width(),
            height: t.source_height(),
        };
        match &source {
            None => source = Some(this),
            Some(s) if *s == this => {}
            Some(s) => {
                return Err(format!(
                    "thumbnails of different images: {s:?} and {this:?}"
                ));
            }
        }
        thumbs.push(Thumb {
            size: t.size(),
            width: t.width(),
            height: t.height(),
            bytes: t.png().len(),
            sha256: t.sha256().to_string(),
        });
    }
    thumbs.sort_by_key(|t| t.size);
    Ok(Summary {
        source: source.ok_or("no thumbnails to summarize")?,
        thumbnails: thumbs,
    })
}

#[cfg(test)]
mod tests {
    use super::{image, summarize};

    fn thumbnail(size: u32) -> Vec<u8> {
        image::Thumbnail {
            size,
            width: size,
            height: size / 2,
            png: vec![0; size as usize],
            sha256: format!("{size:064x}"),
            source_width: 200,
            source_height: 100,
        }
        .encode()
        .unwrap()
    }

    #[test]
    fn sorts_by_size() {
        let messages = [thumbnail(64), thumbnail(16), thumbnail(32)];
        let summary = summarize(messages.iter().map(|m| image::ThumbnailView::root(m))).unwrap();
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(
            json["source"],
            serde_json::json!({"width": 200, "height": 100})
        );
        let sizes: Vec<_> = summary.thumbnails.iter().map(|t| t.size).collect();
        assert_eq!(sizes, [16, 32, 64]);
        assert_eq!(
            json["thumbnails"][0],
            serde_json::json!({"size": 16, "width": 16, "height": 8, "bytes": 16, "sha256": format!("{:064x}", 16)})
        );
    }

    #[test]
    fn needs_thumbnails() {
        assert!(summarize([]).is_err());
    }
}
