//! Reading AMD GPU code objects (ELF, `EM_AMDGPU`): kernel names and resource use.
//!
//! Used by the symbol-contract tests and by `cargo xtask kernels --report`, so both read the
//! same facts the HIP runtime reads: the `NT_AMDGPU_METADATA` note (a MessagePack document,
//! code-object v3 and newer) lists every kernel with its VGPR/SGPR counts, LDS and scratch
//! sizes, spills and wave size. No external tool is needed.

use std::collections::BTreeMap;

/// Why a code object could not be read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError(pub String);

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed AMDGPU code object: {}", self.0)
    }
}

impl std::error::Error for ParseError {}

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

/// Resource use of one kernel, from the code object's metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelInfo {
    /// The kernel's name (`.name`).
    pub name: String,
    /// Vector registers per work-item (`.vgpr_count`).
    pub vgprs: u64,
    /// Accumulation registers (`.agpr_count`, gfx90a/gfx942; 0 elsewhere).
    pub agprs: u64,
    /// Scalar registers per wave (`.sgpr_count`).
    pub sgprs: u64,
    /// Static LDS bytes (`.group_segment_fixed_size`).
    pub lds_bytes: u64,
    /// Scratch bytes per work-item (`.private_segment_fixed_size`); non-zero means spills or
    /// stack use.
    pub scratch_bytes: u64,
    /// Spilled VGPRs (`.vgpr_spill_count`).
    pub vgpr_spills: u64,
    /// Spilled SGPRs (`.sgpr_spill_count`).
    pub sgpr_spills: u64,
    /// Wave size the kernel was compiled for (`.wavefront_size`).
    pub wavefront_size: u64,
    /// Largest workgroup it may be launched with (`.max_flat_workgroup_size`).
    pub max_workgroup_size: u64,
}

/// What a code object declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CodeObject {
    /// The target from the metadata, e.g. `amdgcn-amd-amdhsa--gfx1100`.
    pub target: String,
    /// Kernels, sorted by name.
    pub kernels: Vec<KernelInfo>,
}

impl CodeObject {
    /// Parses an AMDGPU ELF code object.
    pub fn parse(bytes: &[u8]) -> Result<CodeObject, ParseError> {
        let note = find_metadata_note(bytes)?;
        let doc = MsgPack::new(note).value()?;
        let Value::Map(top) = doc else {
            return err("metadata is not a map");
        };
        let target = match top.get("amdhsa.target") {
            Some(Value::Str(s)) => s.clone(),
            _ => String::new(),
        };
        let Some(Value::Array(list)) = top.get("amdhsa.kernels") else {
            return err("metadata has no amdhsa.kernels");
        };
        let mut kernels = Vec::new();
        for k in list {
            let Value::Map(m) = k else {
                return err("a kernel entry is not a map");
            };
            let num = |key: &str| match m.get(key) {
                Some(Value::Int(v)) => *v,
                _ => 0,
            };
            let name = match m.get(".name") {
                Some(Value::Str(s)) => s.clone(),
                _ => return err("a kernel has no .name"),
            };
            kernels.push(KernelInfo {
                name,
                vgprs: num(".vgpr_count"),
                agprs: num(".agpr_count"),
                sgprs: num(".sgpr_count"),
                lds_bytes: num(".group_segment_fixed_size"),
                scratch_bytes: num(".private_segment_fixed_size"),
                vgpr_spills: num(".vgpr_spill_count"),
                sgpr_spills: num(".sgpr_spill_count"),
                wavefront_size: num(".wavefront_size"),
                max_workgroup_size: num(".max_flat_workgroup_size"),
            });
        }
        kernels.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(CodeObject { target, kernels })
    }

    /// Whether a kernel of this name exists.
    pub fn has_kernel(&self, name: &str) -> bool {
        self.kernels
            .binary_search_by(|k| k.name.as_str().cmp(name))
            .is_ok()
    }
}

fn u16_at(b: &[u8], off: usize) -> Result<u16, ParseError> {
    match b.get(off..off + 2) {
        Some(s) => Ok(u16::from_le_bytes([s[0], s[1]])),
        None => err(format!("truncated at byte {off}")),
    }
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, ParseError> {
    match b.get(off..off + 4) {
        Some(s) => Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]])),
        None => err(format!("truncated at byte {off}")),
    }
}

fn u64_at(b: &[u8], off: usize) -> Result<u64, ParseError> {
    match b.get(off..off + 8) {
        Some(s) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            Ok(u64::from_le_bytes(a))
        }
        None => err(format!("truncated at byte {off}")),
    }
}

const EM_AMDGPU: u16 = 224;
const SHT_NOTE: u32 = 7;
const PT_NOTE: u32 = 4;
const NT_AMDGPU_METADATA: u32 = 32;

/// Finds the descriptor of the `AMDGPU` / `NT_AMDGPU_METADATA` note.
fn find_metadata_note(b: &[u8]) -> Result<&[u8], ParseError> {
    if b.len() < 64 || &b[..4] != b"\x7fELF" {
        return err("not an ELF file");
    }
    if b[4] != 2 || b[5] != 1 {
        return err("not a 64-bit little-endian ELF");
    }
    if u16_at(b, 18)? != EM_AMDGPU {
        return err("not an AMDGPU ELF (e_machine is not EM_AMDGPU)");
    }
    let to_usize = |v: u64| usize::try_from(v).map_err(|_| ParseError("offset overflow".into()));
    // Section headers first, then program headers (stripped objects may lack sections).
    let (shoff, shentsize, shnum) = (
        to_usize(u64_at(b, 40)?)?,
        u16_at(b, 58)? as usize,
        u16_at(b, 60)? as usize,
    );
    let mut ranges = Vec::new();
    for i in 0..shnum {
        let h = shoff + i * shentsize;
        if u32_at(b, h + 4)? == SHT_NOTE {
            ranges.push((to_usize(u64_at(b, h + 24)?)?, to_usize(u64_at(b, h + 32)?)?));
        }
    }
    let (phoff, phentsize, phnum) = (
        to_usize(u64_at(b, 32)?)?,
        u16_at(b, 54)? as usize,
        u16_at(b, 56)? as usize,
    );
    for i in 0..phnum {
        let h = phoff + i * phentsize;
        if u32_at(b, h)? == PT_NOTE {
            ranges.push((to_usize(u64_at(b, h + 8)?)?, to_usize(u64_at(b, h + 32)?)?));
        }
    }
    for (off, size) in ranges {
        let Some(notes) = b.get(off..off.saturating_add(size)) else {
            return err("note outside the file");
        };
        let mut p = 0;
        while p + 12 <= notes.len() {
            let namesz = u32_at(notes, p)? as usize;
            let descsz = u32_at(notes, p + 4)? as usize;
            let kind = u32_at(notes, p + 8)?;
            let name_start = p + 12;
            let desc_start = name_start + namesz.div_ceil(4) * 4;
            let next = desc_start + descsz.div_ceil(4) * 4;
            let Some(name) = notes.get(name_start..name_start + namesz) else {
                return err("truncated note name");
            };
            if kind == NT_AMDGPU_METADATA && name.starts_with(b"AMDGPU") {
                return match notes.get(desc_start..desc_start + descsz) {
                    Some(d) => Ok(d),
                    None => err("truncated metadata note"),
                };
            }
            p = next;
        }
    }
    err("no NT_AMDGPU_METADATA note (code object v2 or not a code object)")
}

/// The MessagePack values the metadata uses.
#[derive(Clone, Debug, PartialEq)]
enum Value {
    Nil,
    Bool(bool),
    Int(u64),
    NegInt(i64),
    Float(f64),
    Str(String),
    Bin,
    Array(Vec<Value>),
    Map(BTreeMap<String, Value>),
}

/// A minimal MessagePack reader (the subset the AMDGPU metadata uses, plus the rest of the
/// scalar formats so unknown fields are skipped correctly).
struct MsgPack<'a> {
    b: &'a [u8],
    p: usize,
    depth: u32,
}

impl<'a> MsgPack<'a> {
    fn new(b: &'a [u8]) -> Self {
        MsgPack { b, p: 0, depth: 0 }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        let end = self.p.checked_add(n).filter(|&e| e <= self.b.len());
        match end {
            Some(e) => {
                let s = &self.b[self.p..e];
                self.p = e;
                Ok(s)
            }
            None => err("truncated metadata"),
        }
    }

    fn uint(&mut self, n: usize) -> Result<u64, ParseError> {
        Ok(self
            .take(n)?
            .iter()
            .fold(0u64, |acc, &x| (acc << 8) | x as u64))
    }

    fn str(&mut self, n: usize) -> Result<Value, ParseError> {
        Ok(Value::Str(
            String::from_utf8_lossy(self.take(n)?).into_owned(),
        ))
    }

    fn array(&mut self, n: usize) -> Result<Value, ParseError> {
        let mut v = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            v.push(self.value()?);
        }
        Ok(Value::Array(v))
    }

    fn map(&mut self, n: usize) -> Result<Value, ParseError> {
        let mut m = BTreeMap::new();
        for _ in 0..n {
            let key = match self.value()? {
                Value::Str(s) => s,
                other => format!("{other:?}"),
            };
            m.insert(key, self.value()?);
        }
        Ok(Value::Map(m))
    }

    fn value(&mut self) -> Result<Value, ParseError> {
        self.depth += 1;
        if self.depth > 64 {
            return err("metadata nested too deeply");
        }
        let tag = self.take(1)?[0];
        let v = match tag {
            0x00..=0x7f => Value::Int(tag as u64),
            0x80..=0x8f => self.map((tag & 0x0f) as usize)?,
            0x90..=0x9f => self.array((tag & 0x0f) as usize)?,
            0xa0..=0xbf => self.str((tag & 0x1f) as usize)?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let n = self.uint(1 << (tag - 0xc4))? as usize;
                self.take(n)?;
                Value::Bin
            }
            0xca => Value::Float(f32::from_bits(self.uint(4)? as u32) as f64),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => Value::Int(self.uint(1 << (tag - 0xcc))?),
            0xd0..=0xd3 => {
                let n = 1usize << (tag - 0xd0);
                let raw = self.uint(n)?;
                let shift = 64 - 8 * n as u32;
                let v = ((raw << shift) as i64) >> shift;
                if v >= 0 {
                    Value::Int(v as u64)
                } else {
                    Value::NegInt(v)
                }
            }
            0xd9..=0xdb => {
                let n = self.uint(1 << (tag - 0xd9))? as usize;
                self.str(n)?
            }
            0xdc | 0xdd => {
                let n = self.uint(if tag == 0xdc { 2 } else { 4 })? as usize;
                self.array(n)?
            }
            0xde | 0xdf => {
                let n = self.uint(if tag == 0xde { 2 } else { 4 })? as usize;
                self.map(n)?
            }
            0xe0..=0xff => Value::NegInt((tag as i8) as i64),
            other => return err(format!("unsupported MessagePack tag 0x{other:02x}")),
        };
        self.depth -= 1;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a minimal AMDGPU ELF with one note section holding `desc`.
    fn elf_with_note(desc: &[u8]) -> Vec<u8> {
        let mut note = Vec::new();
        note.extend_from_slice(&7u32.to_le_bytes()); // "AMDGPU\0"
        note.extend_from_slice(&(desc.len() as u32).to_le_bytes());
        note.extend_from_slice(&NT_AMDGPU_METADATA.to_le_bytes());
        note.extend_from_slice(b"AMDGPU\0\0");
        note.extend_from_slice(desc);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let mut b = vec![0u8; 64];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        let note_off = 64u64;
        b.extend_from_slice(&note);
        let shoff = b.len() as u64;
        // One section header (64 bytes): type SHT_NOTE, offset, size.
        let mut sh = vec![0u8; 64];
        sh[4..8].copy_from_slice(&SHT_NOTE.to_le_bytes());
        sh[24..32].copy_from_slice(&note_off.to_le_bytes());
        sh[32..40].copy_from_slice(&(note.len() as u64).to_le_bytes());
        b.extend_from_slice(&sh);
        b[40..48].copy_from_slice(&shoff.to_le_bytes());
        b[58..60].copy_from_slice(&64u16.to_le_bytes());
        b[60..62].copy_from_slice(&1u16.to_le_bytes());
        b
    }

    fn mp_str(s: &str) -> Vec<u8> {
        let mut v = vec![0xa0 | s.len() as u8];
        v.extend_from_slice(s.as_bytes());
        v
    }

    #[test]
    fn reads_kernels_from_metadata() {
        // {"amdhsa.target": "amdgcn-amd-amdhsa--gfx1100",
        //  "amdhsa.kernels": [{".name": "affine_f32", ".vgpr_count": 12, ".sgpr_count": 300,
        //                      ".private_segment_fixed_size": 0, ".wavefront_size": 32}]}
        let mut m = vec![0x82];
        m.extend(mp_str("amdhsa.target"));
        m.extend(mp_str("amdgcn-amd-amdhsa--gfx1100"));
        m.extend(mp_str("amdhsa.kernels"));
        m.push(0x91);
        m.push(0x85);
        m.extend(mp_str(".name"));
        m.extend(mp_str("affine_f32"));
        m.extend(mp_str(".vgpr_count"));
        m.push(12);
        m.extend(mp_str(".sgpr_count"));
        m.extend([0xcd, 0x01, 0x2c]);
        m.extend(mp_str(".private_segment_fixed_size"));
        m.push(0);
        m.extend(mp_str(".wavefront_size"));
        m.push(32);
        let co = CodeObject::parse(&elf_with_note(&m)).unwrap();
        assert_eq!(co.target, "amdgcn-amd-amdhsa--gfx1100");
        assert_eq!(co.kernels.len(), 1);
        let k = &co.kernels[0];
        assert_eq!(
            (k.name.as_str(), k.vgprs, k.sgprs, k.wavefront_size),
            ("affine_f32", 12, 300, 32)
        );
        assert!(co.has_kernel("affine_f32") && !co.has_kernel("affine_f16"));
    }

    #[test]
    fn rejects_non_amdgpu_and_truncated_input() {
        assert!(CodeObject::parse(b"not an elf").is_err());
        let mut elf = elf_with_note(&[0x80]);
        assert!(CodeObject::parse(&elf)
            .unwrap_err()
            .0
            .contains("amdhsa.kernels"));
        elf[18] = 62; // EM_X86_64
        assert!(CodeObject::parse(&elf).unwrap_err().0.contains("EM_AMDGPU"));
        let elf = elf_with_note(&[0xdc, 0xff]);
        assert!(CodeObject::parse(&elf).is_err());
        // Every truncation of a valid object is an error, never a panic.
        let full = elf_with_note(&[0x81, 0xa1, b'x', 0x01]);
        for n in 0..full.len() {
            let _ = CodeObject::parse(&full[..n]);
        }
    }
}
