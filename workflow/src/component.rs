//! What a component file must look like before anything tries to compile it: the
//! WebAssembly binary header of a component, not of a core module or another file.
//! Checked where the file is read (the CLI, naming it) and where its bytes arrive (the
//! worker), so a wrong file gets one line instead of the parser's dump of bytes.

/// Every WebAssembly binary starts with these four bytes.
const MAGIC: [u8; 4] = *b"\0asm";
/// Version and layer of a core module (the MVP binary format).
const CORE_MODULE: [u8; 4] = [1, 0, 0, 0];
/// Layer 1 marks a component; its version has changed while the format settled.
const COMPONENT_LAYER: [u8; 2] = [1, 0];

/// Why some bytes are not a WebAssembly component.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAComponent {
    /// Not WebAssembly at all.
    #[error("not WebAssembly (it starts with {starts}, not the `\\0asm` header)")]
    NotWasm {
        /// The first bytes, in hex.
        starts: String,
    },
    /// A core module, which the platform cannot run as a function.
    #[error(
        "a core WebAssembly module, not a component (build for wasm32-wasip2, or wrap it \
         with `wasm-tools component new`)"
    )]
    CoreModule,
    /// WebAssembly of a layer or version this platform does not know.
    #[error("WebAssembly of an unknown layer or version ({found})")]
    UnknownVersion {
        /// The four version and layer bytes, in hex.
        found: String,
    },
}

/// Checks that `bytes` start like a WebAssembly component; the compiler checks the rest.
///
/// # Errors
/// [`NotAComponent`] saying what the bytes are instead.
pub fn check_component_header(bytes: &[u8]) -> Result<(), NotAComponent> {
    if bytes.len() < 8 || bytes[..4] != MAGIC {
        return Err(NotAComponent::NotWasm {
            starts: if bytes.is_empty() {
                "nothing (the file is empty)".to_owned()
            } else {
                hex_bytes(&bytes[..bytes.len().min(4)])
            },
        });
    }
    let version = &bytes[4..8];
    if version == CORE_MODULE {
        return Err(NotAComponent::CoreModule);
    }
    if version[2..] != COMPONENT_LAYER {
        return Err(NotAComponent::UnknownVersion {
            found: hex_bytes(version),
        });
    }
    Ok(())
}

fn hex_bytes(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_pass_and_everything_else_says_what_it_is() {
        let component = [b'\0', b'a', b's', b'm', 0x0d, 0, 1, 0, 0xff];
        assert_eq!(check_component_header(&component), Ok(()));
        let module = [b'\0', b'a', b's', b'm', 1, 0, 0, 0];
        assert_eq!(
            check_component_header(&module),
            Err(NotAComponent::CoreModule)
        );
        let elf = b"\x7fELF\x02\x01\x01\x00";
        let err = check_component_header(elf).unwrap_err();
        assert_eq!(err.to_string().lines().count(), 1);
        assert!(err.to_string().contains("7f 45 4c 46"), "{err}");
        assert!(
            check_component_header(b"")
                .unwrap_err()
                .to_string()
                .contains("empty")
        );
        let future = [b'\0', b'a', b's', b'm', 1, 0, 2, 0];
        assert!(matches!(
            check_component_header(&future),
            Err(NotAComponent::UnknownVersion { .. })
        ));
    }
}
