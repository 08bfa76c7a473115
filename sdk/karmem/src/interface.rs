//! Static descriptions of interfaces and their shared memories.
//!
//! A schema may declare interfaces whose functions take arguments living in named shared
//! memories (the Karmem paper's model). Generated code exposes them as `const` values of
//! these types so the platform can size regions and enforce access rights at run time
//! without parsing the schema.

/// Size of a WebAssembly page, the unit of [`MemorySpec::max_pages`].
pub const PAGE_SIZE: usize = 64 * 1024;

/// What one side of an interface may do with a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Access {
    /// No access.
    None,
    /// May read only.
    Read,
    /// May write only.
    Write,
    /// May read and write.
    ReadWrite,
}

impl Access {
    /// Whether this side may read.
    pub const fn can_read(self) -> bool {
        matches!(self, Access::Read | Access::ReadWrite)
    }
    /// Whether this side may write.
    pub const fn can_write(self) -> bool {
        matches!(self, Access::Write | Access::ReadWrite)
    }
    /// The keyword used in schemas (`none`, `read`, `write`, `readwrite`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Access::None => "none",
            Access::Read => "read",
            Access::Write => "write",
            Access::ReadWrite => "readwrite",
        }
    }
}

/// A shared memory declared by an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemorySpec {
    /// Name of the memory (unique within its interface).
    pub name: &'static str,
    /// Access of the module that imports the interface.
    pub importer: Access,
    /// Access of the module that exports (implements) the interface.
    pub exporter: Access,
    /// Maximum size in 64 KiB pages.
    pub max_pages: u32,
}

impl MemorySpec {
    /// Maximum size in bytes (`max_pages * 64 KiB`).
    pub const fn max_bytes(&self) -> u64 {
        self.max_pages as u64 * PAGE_SIZE as u64
    }
}

/// An argument (or result) of an interface function and the memory it lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArgSpec {
    /// Argument name (`"result"` for a function's result).
    pub name: &'static str,
    /// Schema type name of the value.
    pub type_name: &'static str,
    /// Name of the memory of the same interface that holds the encoded value.
    pub memory: &'static str,
}

/// A function of an interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionSpec {
    /// Function name.
    pub name: &'static str,
    /// Arguments in declaration order.
    pub args: &'static [ArgSpec],
    /// Result, if the function declares one.
    pub result: Option<ArgSpec>,
}

/// An interface: shared memories plus the functions whose arguments live in them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InterfaceSpec {
    /// Interface name.
    pub name: &'static str,
    /// Communication patterns given in parentheses after the name (e.g. `fanout`).
    pub patterns: &'static [&'static str],
    /// Declared memories.
    pub memories: &'static [MemorySpec],
    /// Declared functions.
    pub functions: &'static [FunctionSpec],
}

impl InterfaceSpec {
    /// The memory called `name`, if declared.
    pub fn memory(&self, name: &str) -> Option<&'static MemorySpec> {
        self.memories.iter().find(|m| m.name == name)
    }
    /// The function called `name`, if declared.
    pub fn function(&self, name: &str) -> Option<&'static FunctionSpec> {
        self.functions.iter().find(|f| f.name == name)
    }
}
