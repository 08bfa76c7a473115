//! A guest that tries to get at memory it must not see, for the regions security tests.
//! Config `probe` picks the attempt; each either fails the step (the platform refused)
//! or reports what it saw as JSON (which the tests check is nothing foreign).
//!
//! - `forge-handle`: uses a region handle it was never given.
//! - `unaligned`: offers pages that do not start on a page boundary.
//! - `out-of-bounds`: offers pages beyond the end of its memory.
//! - `oversize`: asks for more capacity than its Karmem interface declares.
//! - `unsealed`: returns a region it never sealed.
//! - `write-read-only`: writes into an input the interface lets it only read.
//! - `tail`: places its input and reports any non-zero byte after the value up to the
//!   end of its last page.
//! - `scan`: grows its memory by config `pages` fresh pages and reports any non-zero
//!   byte in them (a reused instance slot must not show a previous payload).
//! - `replace-read-only`: places its read-only input, then asks the host to place it
//!   again over the same (now read-only) pages.
//! - `host-writes-read-only`: places its read-only input, then calls a host function
//!   through the raw import, with the address for the result inside those pages: the
//!   host writes there from host code, where a fault would kill the process.
//! - `recreate`: creates a region twice over the same pages (each would otherwise pin a
//!   memory file the size of the pages, invisible to its memory limit).
//! - `flood`: creates one-page regions on fresh pages until the host stops it.
//! - `long-type`: makes 64 empty regions whose type is 16 MiB of text, which the host
//!   would keep outside every memory limit.
//! - `scatter`: places its input on every other span of pages, config `pairs` times
//!   (100), then holds them config `hold_ms` milliseconds (0): each placement of a
//!   read-only value leaves a protected range, which splits the process's memory maps.
//! - `host-calls`: places its input as `scatter` does (config `pairs`, 100), then calls
//!   the host (`config.get`) over and over for config `ms` milliseconds (1000) and
//!   reports how many calls it made: every host call lifts and restores the protection
//!   of its read-only ranges.
//! - `copy-out`: returns a value of config `mb` MiB (1) copied with `from-bytes`, of
//!   the step's output type `blob.km:Blob` (as the example's producer).
//! - `copy-in`: asks the host for a copy of its input (`bytes`) and reports its length:
//!   the copy must not be made when the input is larger than its memory may hold.
//! - `seal-short`: fills a region of config `mb` MiB (1) of the step's output type
//!   `blob.km:Blob`, and seals one byte of it (the memory file must not keep the rest).
//! - `huge-error`: fails with a 32 MiB error text, which the platform must not keep.
//! - `spin`: computes forever (a run whose caller stops waiting must stop it).
//! - `initial-data`: reports whether its initial data (a data segment of sevens) is
//!   intact, then offers those pages to the host, to place its input in and to make a
//!   region of, and reports what each answered. Under copy-on-write images, replacing
//!   such pages would leave the next instance zeros where its initial data should be.

use faas_sdk::region::{PAGE_SIZE, RegionExt, RegionWriter};
use faas_sdk::step::{Context, Region, StepResult};

#[faas_sdk::step]
fn step(_ctx: Context, inputs: Vec<Region>) -> StepResult {
    let probe = faas_sdk::config::get("probe").unwrap_or_default();
    let report = match probe.as_str() {
        "forge-handle" => {
            // SAFETY (of the guest): deliberately not; the host must refuse the handle.
            let forged = unsafe { Region::from_handle(0x7fff_0001) };
            format!("{{\"len\":{}}}", forged.len())
        }
        "unaligned" => {
            let pages = grow(2)?;
            let result = Region::create_in("bytes", &pages[1..PAGE_SIZE + 1]);
            return result.map(|region| vec![region]);
        }
        "out-of-bounds" => {
            let end = core::arch::wasm32::memory_size(0) * PAGE_SIZE;
            // SAFETY (of the guest): deliberately not; the host must refuse to lift it.
            let beyond = unsafe { core::slice::from_raw_parts(end as *const u8, PAGE_SIZE) };
            return Region::create_in("bytes", beyond).map(|region| vec![region]);
        }
        "oversize" => {
            let writer = RegionWriter::<()>::labelled("bytes", 4 * PAGE_SIZE)?;
            return writer.finish(0).map(|region| vec![region]);
        }
        "unsealed" => {
            let pages = grow(1)?;
            // Labelled as the step's output type, so only the missing seal is wrong.
            return Region::create_in("json", pages).map(|region| vec![region]);
        }
        "write-read-only" => {
            let input = inputs.first().ok_or("needs an input")?;
            let bytes = input.place()?;
            // SAFETY (of the guest): deliberately not; the page is mapped read-only and
            // the write must trap.
            unsafe { core::ptr::write_volatile(bytes.as_ptr() as *mut u8, 1) };
            "{\"wrote\":true}".to_owned()
        }
        "tail" => {
            let input = inputs.first().ok_or("needs an input")?;
            let bytes = input.place()?;
            let end = bytes.len().div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE;
            // SAFETY: the value was placed at the start of fresh pages that span `end`.
            let tail = unsafe {
                core::slice::from_raw_parts(bytes.as_ptr().add(bytes.len()), end - bytes.len())
            };
            format!(
                "{{\"len\":{},\"tail\":{},\"nonzero\":{}}}",
                bytes.len(),
                tail.len(),
                nonzero(tail)
            )
        }
        "scan" => {
            let pages = config_number("pages").unwrap_or(256);
            let fresh = grow(pages)?;
            format!(
                "{{\"scanned\":{},\"nonzero\":{}}}",
                fresh.len(),
                nonzero(fresh)
            )
        }
        "replace-read-only" => {
            let input = inputs.first().ok_or("needs an input")?;
            let bytes = input.place()?;
            let pages = bytes.len().div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE;
            // SAFETY (of the guest): the placed value's pages, read-only; only the host
            // touches them here.
            let again = unsafe { core::slice::from_raw_parts(bytes.as_ptr(), pages) };
            input.read_into(again)?;
            "{\"placed_twice\":true}".to_owned()
        }
        "host-writes-read-only" => {
            let input = inputs.first().ok_or("needs an input")?;
            let bytes = input.place()?;
            let key = "probe";
            // SAFETY (of the guest): deliberately hands the host a result address in
            // read-only pages; the host must neither fault nor let the guest write.
            unsafe { raw_config_get(key.as_ptr(), key.len(), bytes.as_ptr() as *mut u8) };
            eprintln!("host call returned");
            // SAFETY (of the guest): deliberately not; the pages must be read-only again.
            unsafe { core::ptr::write_volatile(bytes.as_ptr().add(8) as *mut u8, 1) };
            "{\"wrote_read_only\":true}".to_owned()
        }
        "recreate" => {
            let pages = grow(1)?;
            let first = Region::create_in("bytes", pages)?;
            let second = Region::create_in("bytes", pages)?;
            drop((first, second));
            "{\"created_twice\":true}".to_owned()
        }
        "flood" => {
            let mut regions = Vec::new();
            loop {
                regions.push(Region::create_in("bytes", grow(1)?)?);
                core::hint::black_box(&regions);
            }
        }
        "long-type" => {
            let schema_type = "T".repeat(16 << 20);
            let kept: Vec<Region> = (0..64)
                .map(|_| Region::from_bytes(&schema_type, b""))
                .collect();
            format!("{{\"kept\":{}}}", kept.len())
        }
        "scatter" => {
            let pairs = place_scattered(&inputs)?;
            let hold = config_number("hold_ms").unwrap_or(0) as u64;
            std::thread::sleep(std::time::Duration::from_millis(hold));
            format!("{{\"placed\":{pairs}}}")
        }
        "host-calls" => {
            let pairs = place_scattered(&inputs)?;
            let until =
                std::time::Duration::from_millis(config_number("ms").unwrap_or(1000) as u64);
            let start = std::time::Instant::now();
            let mut calls = 0u64;
            while start.elapsed() < until {
                core::hint::black_box(faas_sdk::config::get("probe"));
                calls += 1;
            }
            format!("{{\"placed\":{pairs},\"calls\":{calls}}}")
        }
        "copy-out" => {
            let bytes = vec![7u8; config_number("mb").unwrap_or(1) << 20];
            return Ok(vec![Region::from_bytes("blob.km:Blob", &bytes)]);
        }
        "copy-in" => {
            let input = inputs.first().ok_or("needs an input")?;
            format!("{{\"copied\":{}}}", input.bytes().len())
        }
        "seal-short" => {
            let capacity = config_number("mb").unwrap_or(1) << 20;
            let mut writer = RegionWriter::<()>::labelled("blob.km:Blob", capacity)?;
            writer.buffer().fill(7);
            return writer.finish(1).map(|region| vec![region]);
        }
        "huge-error" => return Err("E".repeat(32 << 20)),
        "spin" => loop {
            core::hint::black_box(&inputs);
        },
        "initial-data" => {
            let intact = SEVENS.0.iter().all(|&byte| byte == 7);
            let input = inputs.first().ok_or("needs an input")?;
            let pages = &SEVENS.0[..];
            let placed = input.read_into(pages).map(|()| "placed".to_owned());
            let created = Region::create_in("bytes", pages).map(|_| "created".to_owned());
            format!(
                "{{\"intact\":{intact},\"placed\":{:?},\"created\":{:?}}}",
                placed.unwrap_or_else(|err| err),
                created.unwrap_or_else(|err| err)
            )
        }
        other => return Err(format!("unknown probe `{other}`")),
    };
    Ok(vec![Region::from_bytes("json", report.as_bytes())])
}

/// Initial data on whole pages: two pages of sevens, a data segment of the component.
#[repr(C, align(65536))]
struct Sevens([u8; 2 * PAGE_SIZE]);
static SEVENS: Sevens = Sevens([7; 2 * PAGE_SIZE]);

#[link(wasm_import_module = "faas:platform/config@0.1.0")]
unsafe extern "C" {
    /// `config.get` as the canonical ABI lowers it: the key, and where the host writes
    /// the `option<string>` result.
    #[link_name = "get"]
    fn raw_config_get(key: *const u8, key_len: usize, result: *mut u8);
}

/// Places the first input on every other span of fresh pages, config `pairs` times
/// (100); says how many.
fn place_scattered(inputs: &[Region]) -> Result<usize, String> {
    let input = inputs.first().ok_or("needs an input")?;
    let pairs = config_number("pairs").unwrap_or(100);
    let span = (input.len() as usize).div_ceil(PAGE_SIZE).max(1);
    let pages = grow(2 * pairs * span)?;
    for pair in pages.chunks(2 * span * PAGE_SIZE) {
        input.read_into(&pair[..span * PAGE_SIZE])?;
    }
    Ok(pairs)
}

fn config_number(key: &str) -> Option<usize> {
    faas_sdk::config::get(key).and_then(|value| value.parse().ok())
}

fn nonzero(bytes: &[u8]) -> usize {
    bytes.iter().filter(|byte| **byte != 0).count()
}

/// `pages` fresh pages at the end of linear memory.
fn grow(pages: usize) -> Result<&'static [u8], String> {
    let previous = core::arch::wasm32::memory_grow(0, pages);
    if previous == usize::MAX {
        return Err("memory.grow failed".into());
    }
    // SAFETY: the pages were just added to linear memory.
    Ok(unsafe {
        core::slice::from_raw_parts((previous * PAGE_SIZE) as *const u8, pages * PAGE_SIZE)
    })
}
