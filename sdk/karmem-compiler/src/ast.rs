//! The resolved schema: plain public data describing enums, structs (with their wire
//! layout) and interfaces with shared memories.
//!
//! Everything here is computed by the parser and can be read by tools and by the
//! platform (for instance to size regions from [`MemoryDef::max_pages`]).

use serde::Serialize;

pub use crate::error::Span;

/// A parsed and validated `.km` schema.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Schema {
    /// File name the schema was parsed from (used in messages).
    pub file: String,
    /// Package name from the header (`karmem NAME ...;`).
    pub name: String,
    /// Header tags (`@packed(true)`, `@golang.package(...)`, ...).
    pub tags: Vec<Tag>,
    /// Default packing of structs (`@packed` in the header).
    pub packed: bool,
    /// Enums in declaration order.
    pub enums: Vec<EnumDef>,
    /// Structs in declaration order (every struct only refers to earlier ones).
    pub structs: Vec<StructDef>,
    /// Interfaces in declaration order.
    pub interfaces: Vec<Interface>,
}

impl Schema {
    /// The struct called `name`.
    pub fn find_struct(&self, name: &str) -> Option<&StructDef> {
        self.structs.iter().find(|s| s.name == name)
    }
    /// The enum called `name`.
    pub fn find_enum(&self, name: &str) -> Option<&EnumDef> {
        self.enums.iter().find(|e| e.name == name)
    }
    /// The interface called `name`.
    pub fn find_interface(&self, name: &str) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.name == name)
    }
    /// The struct named by `type_name`, which may be qualified with the package name
    /// (`simplepacked.Simple`) as the reference tools print it.
    pub fn resolve_type(&self, type_name: &str) -> Option<&StructDef> {
        let plain = match type_name.split_once('.') {
            Some((pkg, rest)) if pkg == self.name => rest,
            _ => type_name,
        };
        self.find_struct(plain)
    }
}

/// A `@name(value)` tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tag {
    /// Tag name, possibly dotted (`golang.package`).
    pub name: String,
    /// Value between the parentheses (backticks removed); empty for `@name` or `@name()`.
    pub value: String,
}

/// The scalar types of the language.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Primitive {
    /// `byte` (an unsigned 8-bit integer).
    Byte,
    /// `bool` (one byte, non-zero is true).
    Bool,
    /// `char` (one byte; `[]char` is a string).
    Char,
    /// `uint8`.
    U8,
    /// `uint16`.
    U16,
    /// `uint32`.
    U32,
    /// `uint64`.
    U64,
    /// `int8`.
    I8,
    /// `int16`.
    I16,
    /// `int32`.
    I32,
    /// `int64`.
    I64,
    /// `float32`.
    F32,
    /// `float64`.
    F64,
}

impl Primitive {
    /// The primitive called `name` in schemas.
    pub fn from_schema_name(name: &str) -> Option<Self> {
        Some(match name {
            "byte" => Primitive::Byte,
            "bool" => Primitive::Bool,
            "char" => Primitive::Char,
            "uint8" => Primitive::U8,
            "uint16" => Primitive::U16,
            "uint32" => Primitive::U32,
            "uint64" => Primitive::U64,
            "int8" => Primitive::I8,
            "int16" => Primitive::I16,
            "int32" => Primitive::I32,
            "int64" => Primitive::I64,
            "float32" => Primitive::F32,
            "float64" => Primitive::F64,
            _ => return None,
        })
    }
    /// The name used in schemas.
    pub fn schema_name(self) -> &'static str {
        match self {
            Primitive::Byte => "byte",
            Primitive::Bool => "bool",
            Primitive::Char => "char",
            Primitive::U8 => "uint8",
            Primitive::U16 => "uint16",
            Primitive::U32 => "uint32",
            Primitive::U64 => "uint64",
            Primitive::I8 => "int8",
            Primitive::I16 => "int16",
            Primitive::I32 => "int32",
            Primitive::I64 => "int64",
            Primitive::F32 => "float32",
            Primitive::F64 => "float64",
        }
    }
    /// Encoded size in bytes.
    pub fn size(self) -> u32 {
        match self {
            Primitive::Byte | Primitive::Bool | Primitive::Char | Primitive::U8 | Primitive::I8 => {
                1
            }
            Primitive::U16 | Primitive::I16 => 2,
            Primitive::U32 | Primitive::I32 | Primitive::F32 => 4,
            Primitive::U64 | Primitive::I64 | Primitive::F64 => 8,
        }
    }
    /// Whether this is an integer type usable as an enum representation.
    pub fn is_integer(self) -> bool {
        matches!(
            self,
            Primitive::U8
                | Primitive::U16
                | Primitive::U32
                | Primitive::U64
                | Primitive::I8
                | Primitive::I16
                | Primitive::I32
                | Primitive::I64
        )
    }
    /// Inclusive range of an integer type (`None` for non-integers).
    pub fn integer_range(self) -> Option<(i128, i128)> {
        Some(match self {
            Primitive::U8 | Primitive::Byte | Primitive::Char => (0, u8::MAX as i128),
            Primitive::U16 => (0, u16::MAX as i128),
            Primitive::U32 => (0, u32::MAX as i128),
            Primitive::U64 => (0, u64::MAX as i128),
            Primitive::I8 => (i8::MIN as i128, i8::MAX as i128),
            Primitive::I16 => (i16::MIN as i128, i16::MAX as i128),
            Primitive::I32 => (i32::MIN as i128, i32::MAX as i128),
            Primitive::I64 => (i64::MIN as i128, i64::MAX as i128),
            Primitive::Bool | Primitive::F32 | Primitive::F64 => return None,
        })
    }
}

/// An enum declaration (`enum Color uint8 { Red; Green; Blue = 200; }`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnumDef {
    /// Enum name.
    pub name: String,
    /// Integer type the values are encoded as.
    pub repr: Primitive,
    /// Variants in declaration order.
    pub variants: Vec<EnumVariant>,
    /// Tags after the representation type.
    pub tags: Vec<Tag>,
    /// Where it is declared.
    pub span: Span,
}

/// One enum variant.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EnumVariant {
    /// Variant name.
    pub name: String,
    /// Value; an implicit value is the variant's position, as in the reference compiler.
    pub value: i128,
    /// Whether the value was written explicitly (`= N`).
    pub explicit: bool,
    /// Where it is declared.
    pub span: Span,
}

/// Whether a struct is stored in place or behind an offset with a size header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum StructKind {
    /// Fields stored in place; cannot evolve.
    Inline,
    /// `[u32 size][fields]`, referenced by offset; fields can be appended.
    Table,
}

/// Sizes of a struct on the wire, as computed by the reference compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct StructSize {
    /// Bytes of fields (plus the 4-byte size header for tables).
    pub content: u32,
    /// Padding after the content (unpacked inline structs only: `8 - content % 8`).
    pub padding: u32,
    /// `content + padding`: the space a value takes.
    pub total: u32,
    /// Bytes that must be present for a reader to look at the struct (4 for packed
    /// tables, 8 for unpacked tables, `content` for inline structs).
    pub minimum: u32,
}

/// A struct declaration with its computed layout.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StructDef {
    /// Struct name.
    pub name: String,
    /// Inline or table.
    pub kind: StructKind,
    /// Whether the struct is packed (header default or its own `@packed`).
    pub packed: bool,
    /// Fields in declaration order with offsets.
    pub fields: Vec<FieldDef>,
    /// Sizes on the wire.
    pub size: StructSize,
    /// Tags after the kind (`@packed`, `@id`, ...).
    pub tags: Vec<Tag>,
    /// Where it is declared.
    pub span: Span,
}

impl StructDef {
    /// Whether this is a table.
    pub fn is_table(&self) -> bool {
        self.kind == StructKind::Table
    }
    /// Size of a slice header inside this struct (8 packed, 12 unpacked).
    pub fn slice_header_size(&self) -> u32 {
        if self.packed { 8 } else { 12 }
    }
}

/// The shape of a field: one value, a fixed array or a slice.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Shape {
    /// One value (`T`).
    Single,
    /// Fixed-size array stored in place (`[N]T`).
    Array(u32),
    /// Slice stored elsewhere (`[]T`).
    Slice,
    /// Slice whose readers keep at most N elements (`[<N]T`).
    LimitedSlice(u32),
}

/// What the elements of a field are.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum BaseType {
    /// A scalar.
    Primitive(Primitive),
    /// An enum declared in the schema.
    Enum(String),
    /// An inline struct declared in the schema.
    Inline(String),
    /// A table declared in the schema (stored as a `u32` offset).
    Table(String),
}

/// The type of a field.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FieldType {
    /// Element type.
    pub base: BaseType,
    /// Single value, array or slice.
    pub shape: Shape,
    /// The type as written in the schema (`[<4]uint32`).
    pub text: String,
}

impl FieldType {
    /// Whether this is a string (`char` elements in a slice or array).
    pub fn is_string(&self) -> bool {
        self.base == BaseType::Primitive(Primitive::Char) && self.shape != Shape::Single
    }
    /// Whether the data lives elsewhere in the buffer (slices and tables).
    pub fn is_out_of_line(&self) -> bool {
        matches!(self.shape, Shape::Slice | Shape::LimitedSlice(_))
            || matches!(self.base, BaseType::Table(_))
    }
}

/// A struct field with its position in the struct.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FieldDef {
    /// Field name.
    pub name: String,
    /// Field type.
    pub ty: FieldType,
    /// Byte offset inside the struct (tables count their 4-byte size header).
    pub offset: u32,
    /// Bytes the field takes inside the struct.
    pub size: u32,
    /// Size of one element (of the slice or array, or of the value itself).
    pub elem_size: u32,
    /// Tags after the type.
    pub tags: Vec<Tag>,
    /// Where it is declared.
    pub span: Span,
}

/// Access rights of one side of an interface to a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Access {
    /// No access.
    None,
    /// Read only.
    Read,
    /// Write only.
    Write,
    /// Read and write.
    ReadWrite,
}

impl Access {
    /// Parses the schema keyword (`none`, `read`, `write`, `readwrite`/`rw`).
    pub fn from_keyword(word: &str) -> Option<Self> {
        Some(match word {
            "none" => Access::None,
            "read" => Access::Read,
            "write" => Access::Write,
            "readwrite" | "rw" => Access::ReadWrite,
            _ => return None,
        })
    }
    /// Whether this side may read.
    pub fn can_read(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }
    /// Whether this side may write.
    pub fn can_write(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
}

/// An interface (`interface resize (fanout) { ... }`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interface {
    /// Interface name.
    pub name: String,
    /// Communication patterns given in parentheses (e.g. `fanout`).
    pub patterns: Vec<String>,
    /// Shared memories.
    pub memories: Vec<MemoryDef>,
    /// Functions.
    pub functions: Vec<FunctionDef>,
    /// Tags after the patterns.
    pub tags: Vec<Tag>,
    /// Where it is declared.
    pub span: Span,
}

impl Interface {
    /// The memory called `name`.
    pub fn memory(&self, name: &str) -> Option<&MemoryDef> {
        self.memories.iter().find(|m| m.name == name)
    }
}

/// A shared memory of an interface (`input: memory (import: write, export: read, 64);`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryDef {
    /// Memory name.
    pub name: String,
    /// Access of the module importing the interface.
    pub importer: Access,
    /// Access of the module exporting (implementing) the interface.
    pub exporter: Access,
    /// Maximum size in 64 KiB pages.
    pub max_pages: u32,
    /// Where it is declared.
    pub span: Span,
}

impl MemoryDef {
    /// Maximum size in bytes.
    pub fn max_bytes(&self) -> u64 {
        u64::from(self.max_pages) * 65536
    }
}

/// A function of an interface (`process: fn(frame: Frame @ input) -> Out @ output;`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FunctionDef {
    /// Function name.
    pub name: String,
    /// Arguments in order.
    pub args: Vec<ArgDef>,
    /// Result, if declared.
    pub result: Option<ArgDef>,
    /// Where it is declared.
    pub span: Span,
}

/// A function argument (or result) and the memory holding it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArgDef {
    /// Argument name (`result` for a result).
    pub name: String,
    /// Struct type of the value.
    pub type_name: String,
    /// Memory of the interface that holds the encoded value.
    pub memory: String,
    /// Where it is declared.
    pub span: Span,
}
