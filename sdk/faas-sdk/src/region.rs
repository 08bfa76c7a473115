//! Regions in place: writers that encode straight into fresh pages of this instance's
//! memory, and views over inputs where the host placed them (mapped from the
//! producer's pages when large, copied when small). No pointers, no serialization.
//!
//! ```ignore
//! use faas_sdk::region::{RegionExt, RegionWriter};
//! use faas_sdk::step::{Context, Region, StepResult};
//!
//! #[faas_sdk::step]
//! fn brighten(_ctx: Context, inputs: Vec<Region>) -> StepResult {
//!     let frame = inputs[0].view::<Frame>()?; // a FrameView over the mapped bytes
//!     let out = Frame { width: frame.width(), height: frame.height(), pixels: ... };
//!     Ok(vec![RegionWriter::encode(&out)?])
//! }
//! ```

use crate::bindings::faas::platform::region::Region;
use core::marker::PhantomData;
use faas_karmem::Record;

/// The size of a WebAssembly page: region pages start on one and span whole ones.
pub const PAGE_SIZE: usize = 64 * 1024;

/// The label of Karmem type `T` on a region: `<schema>.km:<Type>`, as workflow.toml
/// names it (schema files are named after their schema).
pub fn type_label<T: Record>() -> String {
    format!("{}.km:{}", T::SCHEMA, T::NAME)
}

/// Whether `label` names Karmem type `T`, wherever its manifest keeps the schema file
/// (`sensors.km:Location` and `../sensors.km:Location` both name `sensors.Location`).
pub fn label_names<T: Record>(label: &str) -> bool {
    let Some((file, name)) = label.rsplit_once(':') else {
        return false;
    };
    let stem = file.rsplit('/').next().unwrap_or(file);
    name == T::NAME && stem.strip_suffix(".km") == Some(T::SCHEMA)
}

/// Fresh, zeroed pages at the end of this instance's linear memory, covering at least
/// `len` bytes. No allocator owns them, so the host may map over them; they last as
/// long as the instance, which is one event.
fn fresh_pages(len: usize) -> Result<&'static mut [u8], String> {
    let pages = len.div_ceil(PAGE_SIZE).max(1);
    let start = grow(pages).ok_or_else(|| format!("cannot grow memory by {pages} pages"))?;
    // SAFETY: the pages were just added to linear memory, are zeroed, and nothing else
    // refers to them.
    Ok(unsafe { core::slice::from_raw_parts_mut(start as *mut u8, pages * PAGE_SIZE) })
}

#[cfg(target_arch = "wasm32")]
fn grow(pages: usize) -> Option<usize> {
    let previous = core::arch::wasm32::memory_grow(0, pages);
    (previous != usize::MAX).then(|| previous * PAGE_SIZE)
}

// Off wasm (a function's unit tests on the host) there is no host to hand pages to;
// aligned, leaked, zeroed memory keeps the code compiling and testable.
#[cfg(not(target_arch = "wasm32"))]
fn grow(pages: usize) -> Option<usize> {
    let layout = std::alloc::Layout::from_size_align(pages * PAGE_SIZE, PAGE_SIZE).ok()?;
    // SAFETY: the layout has a non-zero size.
    let start = unsafe { std::alloc::alloc_zeroed(layout) };
    (!start.is_null()).then_some(start as usize)
}

/// A region being written in place: its pages are this instance's memory, backed by a
/// buffer the host can map into the next step. [`RegionWriter::finish`] seals it.
pub struct RegionWriter<T = ()> {
    region: Region,
    pages: &'static mut [u8],
    _type: PhantomData<fn() -> T>,
}

impl<T: Record> RegionWriter<T> {
    /// A writer with room for `capacity` bytes of a `T`.
    ///
    /// # Errors
    /// If memory cannot grow, or `capacity` exceeds what the step's Karmem interface
    /// declares for its output.
    pub fn new(capacity: usize) -> Result<Self, String> {
        Self::labelled(&type_label::<T>(), capacity)
    }

    /// Encodes `value` in place into a region exactly large enough, and seals it.
    ///
    /// # Errors
    /// As for [`RegionWriter::new`].
    pub fn encode(value: &T) -> Result<Region, String> {
        let mut writer = Self::new(value.encoded_len())?;
        let len = value
            .encode_into(writer.buffer())
            .map_err(|err| err.to_string())?;
        writer.finish(len)
    }
}

impl<T> RegionWriter<T> {
    /// A writer with room for `capacity` bytes, labelled `schema_type` (`text`,
    /// `bytes`, `json` or a Karmem type).
    ///
    /// # Errors
    /// If memory cannot grow, or the host refuses the pages.
    pub fn labelled(schema_type: &str, capacity: usize) -> Result<Self, String> {
        let pages = fresh_pages(capacity)?;
        let region = Region::create_in(schema_type, pages)?;
        Ok(Self {
            region,
            pages,
            _type: PhantomData,
        })
    }

    /// The pages to write the value into, from its first byte.
    pub fn buffer(&mut self) -> &mut [u8] {
        self.pages
    }

    /// Builds the value with Karmem's writer over the pages (for the generated
    /// `...Writer` types) and seals it at the length written.
    ///
    /// # Errors
    /// What `build` returns, or a refused seal.
    pub fn write_with(
        mut self,
        build: impl FnOnce(&mut faas_karmem::Writer<'_>) -> Result<(), faas_karmem::Error>,
    ) -> Result<Region, String> {
        let mut writer = faas_karmem::Writer::new(self.buffer());
        build(&mut writer).map_err(|err| err.to_string())?;
        let len = writer.len();
        self.finish(len)
    }

    /// Seals the value at `len` bytes and returns the region to hand on. The value now
    /// belongs to the host; the writer is consumed so the pages cannot be changed.
    ///
    /// # Errors
    /// If `len` exceeds the capacity.
    pub fn finish(self, len: usize) -> Result<Region, String> {
        self.region.seal(len as u64)?;
        Ok(self.region)
    }
}

/// Reading a region where it lies.
pub trait RegionExt {
    /// The value's bytes in this instance's memory: the host maps the producer's pages
    /// here (or copies a small value). Each call places the value anew, so call it once.
    ///
    /// # Errors
    /// If memory cannot grow or the host refuses the region.
    fn place(&self) -> Result<&'static [u8], String>;

    /// Like [`RegionExt::place`], but writable: changes stay private to this step (the
    /// mapping is copy-on-write), so no sibling branch sees them.
    ///
    /// # Errors
    /// Also if the step's Karmem interface gives it read access only.
    fn place_mut(&self) -> Result<&'static mut [u8], String>;

    /// A Karmem view of the value, read in place.
    ///
    /// # Errors
    /// If the region is not a `T`, or cannot be placed.
    fn view<T: Record>(&self) -> Result<T::View<'static>, String>;
}

impl RegionExt for Region {
    fn place(&self) -> Result<&'static [u8], String> {
        placed(self).map(|bytes| &*bytes)
    }

    fn place_mut(&self) -> Result<&'static mut [u8], String> {
        if !self.writable() {
            return Err(format!(
                "region `{}` is read-only for this step",
                self.schema_type()
            ));
        }
        placed(self)
    }

    fn view<T: Record>(&self) -> Result<T::View<'static>, String> {
        let label = self.schema_type();
        if !label_names::<T>(&label) {
            return Err(format!(
                "region holds `{label}`, not `{}`",
                type_label::<T>()
            ));
        }
        Ok(T::view(self.place()?))
    }
}

fn placed(region: &Region) -> Result<&'static mut [u8], String> {
    let len = usize::try_from(region.len()).map_err(|err| err.to_string())?;
    let pages = fresh_pages(len)?;
    region.read_into(pages)?;
    Ok(&mut pages[..len])
}
