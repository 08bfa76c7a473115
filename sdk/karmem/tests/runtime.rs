//! Runtime building blocks: bounds-safe reads on arbitrary input and writer capacity.

use faas_karmem::{
    Error, InlineSlice, InlineView, PrimSlice, Str, Writer, field, inline_root, load, slice_data,
    table_at,
};
use proptest::prelude::*;

#[derive(Clone, Copy, Debug)]
struct Pair<'a> {
    bytes: &'a [u8],
}

impl<'a> InlineView<'a> for Pair<'a> {
    const SIZE: usize = 3;
    fn from_parts(_data: &'a [u8], bytes: &'a [u8]) -> Self {
        Pair { bytes }
    }
}

#[test]
fn loads_are_little_endian_unaligned_and_default_out_of_bounds() {
    let b = [0xffu8, 0x01, 0x02, 0x03, 0x04, 0x05];
    assert_eq!(load::<u32>(&b, 1), 0x0403_0201);
    assert_eq!(load::<i16>(&b, 0), 0x01ff);
    assert_eq!(load::<u32>(&b, 3), 0, "runs past the end");
    assert_eq!(load::<u64>(&b, usize::MAX), 0, "offset overflow");
    assert!(load::<bool>(&b, 0));
    assert!(!load::<bool>(&b, 6));
}

#[test]
fn tables_follow_the_reference_rules() {
    // size 8, then 4 bytes of field data.
    let mut msg = vec![8, 0, 0, 0, 1, 2, 3, 4];
    assert_eq!(table_at(&msg, 0, 4).len(), 8);
    assert_eq!(table_at(&msg, 0, 8).len(), 8);
    assert!(table_at(&msg, 0, 9).is_empty(), "below the minimum");
    msg[0] = 9;
    assert!(table_at(&msg, 0, 4).is_empty(), "size past the buffer");
    assert!(table_at(&msg, 100, 4).is_empty(), "offset past the buffer");
    msg[0] = 2;
    assert_eq!(
        table_at(&msg, 0, 4).len(),
        2,
        "a table may record a size below its header"
    );
    assert_eq!(
        inline_root(&msg, 0, 8, 16).len(),
        8,
        "padding may be cut by the end"
    );
    assert!(inline_root(&msg, 1, 8, 16).is_empty());
    assert!(field(&msg, 6, 10).is_empty());
}

#[test]
fn slices_cap_and_default() {
    let data = [10u8, 0, 20, 0, 30, 0, 0xaa];
    let header = [0u8, 0, 0, 0, 6, 0, 0, 0];
    let s = PrimSlice::<u16>::slice(slice_data(&data, &header), usize::MAX);
    assert_eq!(s.to_vec(), vec![10, 20, 30]);
    assert_eq!(
        PrimSlice::<u16>::slice(slice_data(&data, &header), 2).len(),
        2,
        "[<2] caps"
    );
    let past = [0u8, 0, 0, 0, 8, 0, 0, 0];
    assert!(slice_data(&data, &past).is_empty(), "runs past the buffer");
    assert!(slice_data(&data, &[]).is_empty());
    let arr = PrimSlice::<u32>::array(&[], 3);
    assert_eq!(
        arr.to_vec(),
        vec![0, 0, 0],
        "defaulted array keeps its length"
    );
    let pairs = InlineSlice::<Pair<'_>>::slice(&data, &data, usize::MAX);
    assert_eq!(pairs.len(), 2);
    assert_eq!(pairs.get(1).unwrap().bytes, &[0, 30, 0]);
    assert!(pairs.get(2).is_none());
    assert_eq!(Str::limited(b"hello", 3), "hel");
    assert_eq!(Str::new(&[0x61, 0xff]).to_string(), "a\u{fffd}");
}

#[test]
fn writer_allocates_zeroed_space_and_reports_capacity() {
    let mut buf = [0xeeu8; 16];
    let mut w = Writer::new(&mut buf);
    assert_eq!(w.alloc_table(8), Ok(0));
    w.put::<u16>(4, 0xbeef);
    w.put::<u64>(4, 1); // does not fit in the allocated 8 bytes: ignored, no panic
    assert_eq!(w.alloc_bytes(b"abc"), Ok(8));
    assert_eq!(
        w.as_bytes(),
        &[8, 0, 0, 0, 0xef, 0xbe, 0, 0, b'a', b'b', b'c']
    );
    assert_eq!(
        w.alloc(6),
        Err(Error::CapacityExceeded {
            needed: 17,
            capacity: 16
        })
    );
    assert_eq!(
        w.len(),
        11,
        "a failed allocation leaves the message as it was"
    );
    assert_eq!(
        Error::CapacityExceeded {
            needed: 17,
            capacity: 16
        }
        .to_string(),
        "karmem: buffer too small: needed 17 bytes, capacity is 16"
    );
    w.slice_of::<u16>(4, &[], false).unwrap();
    w.reset();
    assert!(w.is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, ..ProptestConfig::default() })]

    /// Whatever the bytes and offsets, reading never panics and never yields more than
    /// the buffer holds.
    #[test]
    fn reading_arbitrary_bytes_is_total(
        data in proptest::collection::vec(any::<u8>(), 0..64),
        offset in any::<u32>(),
        small_offset in 0u32..70,
        min in 0usize..16,
        limit in any::<usize>(),
    ) {
        for off in [offset, small_offset] {
            let t = table_at(&data, off, min);
            prop_assert!(t.len() <= data.len());
            let header = field(t, 4, 12);
            let d = slice_data(&data, header);
            prop_assert!(d.len() <= data.len());
            let s = PrimSlice::<u64>::slice(d, limit);
            prop_assert!(s.len() <= d.len() / 8);
            prop_assert_eq!(s.iter().count(), s.len());
            let p = InlineSlice::<Pair<'_>>::slice(&data, d, limit);
            prop_assert_eq!(p.iter().count(), p.len());
            let _ = Str::limited(d, limit).to_string();
            let _ = load::<f64>(t, off as usize);
            let _ = inline_root(&data, off, min, min + 8);
        }
    }

    /// Writers never panic, fail only for lack of capacity, and keep what they wrote.
    #[test]
    fn writer_never_panics(cap in 0usize..64, ops in proptest::collection::vec((0u8..4, 0usize..40), 0..12)) {
        let mut buf = vec![0u8; cap];
        let mut w = Writer::new(&mut buf);
        for (op, n) in ops {
            let before = w.len();
            let r = match op {
                0 => w.alloc(n).map(|_| ()),
                1 => w.alloc_bytes(&vec![7u8; n]).map(|_| ()),
                2 => w.slice_of::<u32>(n, &[1, 2, 3], n % 2 == 0),
                _ => { w.put::<u64>(n, 9); Ok(()) }
            };
            match r {
                Ok(()) => prop_assert!(w.len() >= before),
                Err(Error::CapacityExceeded { needed, capacity }) => {
                    prop_assert!(needed > capacity && capacity == cap);
                    prop_assert_eq!(w.len(), before);
                }
                Err(e) => prop_assert!(false, "unexpected {e}"),
            }
        }
    }
}
