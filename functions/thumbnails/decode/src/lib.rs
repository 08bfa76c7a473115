//! Thumbnails workflow, step 1 (`decode`): takes a PNG upload as one `bytes` region and
//! decodes it into an `image.km:Image` region of RGBA pixels, 8 bits a channel. Every PNG
//! colour type and bit depth is accepted (palettes and `tRNS` are expanded, 16-bit samples
//! cut to 8, grey made RGB, a missing alpha made opaque); only the first frame of an
//! animated PNG is used. Images over 4096x4096 are refused.

use std::io::Cursor;

use faas_sdk::step::{Context, Region};
use png::{BitDepth, ColorType, Decoder, Transformations};

#[allow(dead_code, clippy::all)]
mod image {
    include!(concat!(env!("OUT_DIR"), "/image.rs"));
}

/// Largest width and height accepted.
const MAX_SIDE: u32 = 4096;

#[faas_sdk::step]
fn handle(_ctx: Context, inputs: Vec<Region>) -> Result<Vec<Region>, String> {
    let [input] = inputs.as_slice() else {
        return Err(format!("expected one PNG region, got {}", inputs.len()));
    };
    let image = decode(&input.bytes())?;
    faas_sdk::log::info(&format!("decoded {}x{}", image.width, image.height));
    let encoded = image.encode().map_err(|e| e.to_string())?;
    Ok(vec![Region::from_bytes("image.km:Image", &encoded)])
}

/// Decodes a PNG file into RGBA8 pixels.
fn decode(png: &[u8]) -> Result<image::Image, String> {
    let bad = |e: png::DecodingError| format!("not a valid PNG: {e}");
    let mut decoder = Decoder::new(Cursor::new(png));
    decoder.set_transformations(Transformations::normalize_to_color8());
    let header = decoder.read_header_info().map_err(bad)?;
    let (width, height) = (header.width, header.height);
    if width > MAX_SIDE || height > MAX_SIDE {
        return Err(format!(
            "image is {width}x{height}, the limit is {MAX_SIDE}x{MAX_SIDE}"
        ));
    }
    let mut reader = decoder.read_info().map_err(bad)?;
    let size = reader
        .output_buffer_size()
        .ok_or("image too large to decode")?;
    let mut buf = vec![0; size];
    let frame = reader.next_frame(&mut buf).map_err(bad)?;
    if frame.bit_depth != BitDepth::Eight {
        return Err(format!("unexpected bit depth {:?}", frame.bit_depth));
    }
    let (w, h) = (frame.width as usize, frame.height as usize);
    if frame.color_type == ColorType::Rgba && frame.line_size == w * 4 {
        // Already RGBA8 and unpadded: keep the buffer (an image may be 64 MiB).
        buf.truncate(w * h * 4);
        return Ok(image::Image {
            width: frame.width,
            height: frame.height,
            pixels: buf,
        });
    }
    let samples = frame.color_type.samples();
    let mut pixels = Vec::with_capacity(w * h * 4);
    for row in buf.chunks_exact(frame.line_size).take(h) {
        for px in row[..w * samples].chunks_exact(samples) {
            let rgba = match frame.color_type {
                ColorType::Grayscale => [px[0], px[0], px[0], 255],
                ColorType::GrayscaleAlpha => [px[0], px[0], px[0], px[1]],
                ColorType::Rgb => [px[0], px[1], px[2], 255],
                ColorType::Rgba => [px[0], px[1], px[2], px[3]],
                ColorType::Indexed => return Err("palette was not expanded".into()),
            };
            pixels.extend_from_slice(&rgba);
        }
    }
    Ok(image::Image {
        width: frame.width,
        height: frame.height,
        pixels,
    })
}

#[cfg(test)]
mod tests {
    use super::decode;
    use png::{BitDepth, ColorType, Encoder};

    fn png(width: u32, height: u32, color: ColorType, depth: BitDepth, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut encoder = Encoder::new(&mut out, width, height);
        encoder.set_color(color);
        encoder.set_depth(depth);
        if color == ColorType::Indexed {
            encoder.set_palette(vec![255, 0, 0, 0, 0, 255]);
            encoder.set_trns(vec![255, 0]);
        }
        let mut writer = encoder.write_header().unwrap();
        writer.write_image_data(data).unwrap();
        writer.finish().unwrap();
        out
    }

    #[test]
    fn every_color_type_becomes_rgba8() {
        let cases: [(ColorType, BitDepth, Vec<u8>); 6] = [
            (ColorType::Grayscale, BitDepth::Eight, vec![10, 200]),
            (ColorType::Grayscale, BitDepth::One, vec![0b0100_0000]),
            (
                ColorType::GrayscaleAlpha,
                BitDepth::Eight,
                vec![10, 1, 200, 2],
            ),
            (
                ColorType::Rgb,
                BitDepth::Sixteen,
                vec![1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0],
            ),
            (
                ColorType::Rgba,
                BitDepth::Eight,
                vec![1, 2, 3, 4, 5, 6, 7, 8],
            ),
            (ColorType::Indexed, BitDepth::Eight, vec![0, 1]),
        ];
        let expected: [[u8; 8]; 6] = [
            [10, 10, 10, 255, 200, 200, 200, 255],
            [0, 0, 0, 255, 255, 255, 255, 255],
            [10, 10, 10, 1, 200, 200, 200, 2],
            [1, 2, 3, 255, 4, 5, 6, 255],
            [1, 2, 3, 4, 5, 6, 7, 8],
            [255, 0, 0, 255, 0, 0, 255, 0],
        ];
        for ((color, depth, data), want) in cases.into_iter().zip(expected) {
            let image = decode(&png(2, 1, color, depth, &data)).unwrap();
            assert_eq!((image.width, image.height), (2, 1), "{color:?} {depth:?}");
            assert_eq!(image.pixels, want, "{color:?} {depth:?}");
        }
    }

    #[test]
    fn refuses_huge_images_and_garbage() {
        let row = vec![0u8; 4097];
        let huge = png(4097, 1, ColorType::Grayscale, BitDepth::Eight, &row);
        assert!(decode(&huge).unwrap_err().contains("limit"));
        assert!(decode(b"not a png").is_err());
    }
}
