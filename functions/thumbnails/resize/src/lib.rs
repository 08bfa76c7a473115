//! Thumbnails workflow, step 2 (`resize`): runs in several branches (static fan-out), each
//! reading the same `image.km:Image` in place. Branch i scales the image so that its
//! longest side is the i-th entry of the config `sizes` (default "16,32,64"), keeping the
//! aspect ratio (at least 1 px a side), encodes the result as an RGBA8 PNG and returns one
//! `image.km:Thumbnail` region with the PNG and its SHA-256 (lowercase hex).
//!
//! Scaling is a box filter: each thumbnail pixel is the average of the source pixels its
//! area covers, colour weighted by alpha so that transparent pixels do not darken the
//! edges. When enlarging, the box holds one pixel, which makes it nearest-neighbour.

use faas_sdk::step::{Context, Region};
use sha2::{Digest, Sha256};

#[allow(dead_code, clippy::all)]
mod image {
    include!(concat!(env!("OUT_DIR"), "/image.rs"));
}

/// Sizes used when the function's config does not say `sizes`.
const DEFAULT_SIZES: &str = "16,32,64";
/// Largest size accepted (the same as the decoder's limit).
const MAX_SIZE: u32 = 4096;

#[faas_sdk::step]
fn handle(ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let sizes = parse_sizes(&faas_sdk::config::get("sizes").unwrap_or(DEFAULT_SIZES.into()))?;
    let size = *sizes.get(ctx.branch as usize).ok_or_else(|| {
        format!(
            "branch {} of {} has no size: config `sizes` lists {}",
            ctx.branch,
            ctx.branches,
            sizes.len()
        )
    })?;
    let [input] = inputs.as_slice() else {
        return Err(format!("expected one Image region, got {}", inputs.len()));
    };
    let bytes = input.bytes();
    let source = image::ImageView::root(&bytes);
    let (width, height) = (source.width(), source.height());
    let pixels = source.pixels().raw_bytes();
    if width == 0 || height == 0 || pixels.len() != width as usize * height as usize * 4 {
        return Err(format!(
            "malformed image: {width}x{height} with {} bytes of pixels",
            pixels.len()
        ));
    }
    let (w, h) = fit(width, height, size);
    let thumb = resize(pixels, width, height, w, h);
    let png = encode_png(&thumb, w, h)?;
    let sha256 = Sha256::digest(&png)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let thumbnail = image::Thumbnail {
        size,
        width: w,
        height: h,
        png,
        sha256,
        source_width: width,
        source_height: height,
    };
    let encoded = thumbnail.encode().map_err(|e| e.to_string())?;
    Ok(vec![Region::from_bytes("image.km:Thumbnail", &encoded)])
}

/// Parses "16,32,64".
fn parse_sizes(text: &str) -> Result<Vec<u32>, String> {
    text.split(',')
        .map(|s| match s.trim().parse::<u32>() {
            Ok(n) if (1..=MAX_SIZE).contains(&n) => Ok(n),
            _ => Err(format!(
                "config `sizes` must list sizes from 1 to {MAX_SIZE}, not {s:?}"
            )),
        })
        .collect()
}

/// Thumbnail dimensions: the longest side becomes `size`, the other keeps the aspect
/// ratio (rounded, at least 1).
fn fit(width: u32, height: u32, size: u32) -> (u32, u32) {
    let scale = |short: u32, long: u32| {
        let scaled = (u64::from(short) * u64::from(size) + u64::from(long) / 2) / u64::from(long);
        (scaled as u32).max(1)
    };
    if width >= height {
        (size, scale(height, width))
    } else {
        (scale(width, height), size)
    }
}

/// Box-filters RGBA8 `pixels` (`sw` x `sh`) to `dw` x `dh`.
fn resize(pixels: &[u8], sw: u32, sh: u32, dw: u32, dh: u32) -> Vec<u8> {
    // The source pixels [start, end) that destination index `i` of `n` covers.
    let span = |i: u32, n: u32, src: u32| {
        let start = (u64::from(i) * u64::from(src) / u64::from(n)) as usize;
        let end = (u64::from(i + 1) * u64::from(src) / u64::from(n)) as usize;
        start..end.max(start + 1)
    };
    let mut out = Vec::with_capacity(dw as usize * dh as usize * 4);
    for y in 0..dh {
        let rows = span(y, dh, sh);
        for x in 0..dw {
            let cols = span(x, dw, sw);
            // Sums of alpha-weighted colour, of alpha, and of plain colour (used when
            // the whole box is transparent).
            let (mut weighted, mut alpha, mut plain) = ([0u64; 3], 0u64, [0u64; 3]);
            for row in rows.clone() {
                for col in cols.clone() {
                    let p = &pixels[(row * sw as usize + col) * 4..][..4];
                    let a = u64::from(p[3]);
                    for c in 0..3 {
                        weighted[c] += u64::from(p[c]) * a;
                        plain[c] += u64::from(p[c]);
                    }
                    alpha += a;
                }
            }
            let count = (rows.len() * cols.len()) as u64;
            let round = |sum: u64, n: u64| ((sum + n / 2) / n) as u8;
            for c in 0..3 {
                out.push(if alpha > 0 {
                    round(weighted[c], alpha)
                } else {
                    round(plain[c], count)
                });
            }
            out.push(round(alpha, count));
        }
    }
    out
}

/// Encodes RGBA8 pixels as a PNG file.
fn encode_png(pixels: &[u8], width: u32, height: u32) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgba);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(|e| e.to_string())?;
    writer.write_image_data(pixels).map_err(|e| e.to_string())?;
    writer.finish().map_err(|e| e.to_string())?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::{encode_png, fit, parse_sizes, resize};

    #[test]
    fn keeps_aspect_ratio() {
        assert_eq!(fit(640, 480, 64), (64, 48));
        assert_eq!(fit(480, 640, 64), (48, 64));
        assert_eq!(fit(1000, 1, 16), (16, 1));
        assert_eq!(fit(3, 3, 32), (32, 32));
    }

    #[test]
    fn averages_boxes() {
        // 2x2 -> 1x1: one opaque red pixel, one opaque blue, two transparent.
        let pixels = [
            255, 0, 0, 255, /**/ 0, 0, 255, 255, //
            9, 9, 9, 0, /**/ 9, 9, 9, 0,
        ];
        assert_eq!(resize(&pixels, 2, 2, 1, 1), [128, 0, 128, 128]);
        // Enlarging repeats pixels.
        assert_eq!(resize(&[1, 2, 3, 4], 1, 1, 2, 1), [1, 2, 3, 4, 1, 2, 3, 4]);
    }

    #[test]
    fn encodes_a_readable_png() {
        let pixels: Vec<u8> = (0..4 * 3 * 2).map(|i| i as u8).collect();
        let png = encode_png(&pixels, 3, 2).unwrap();
        let mut reader = png::Decoder::new(std::io::Cursor::new(&png))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        reader.next_frame(&mut buf).unwrap();
        assert_eq!(buf, pixels);
    }

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_sizes("16, 32,64").unwrap(), [16, 32, 64]);
        assert!(parse_sizes("16,0").is_err());
        assert!(parse_sizes("big").is_err());
    }
}
