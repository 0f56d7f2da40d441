//! [`RocmQStorage`]: a quantized tensor's GGML blocks in device memory (or, for the plain-value
//! types F32/F16/BF16, an ordinary storage), loaded from a GGUF tensor's bytes, with the
//! helpers that move plain values between bytes and host storages. The dequantize and
//! product paths extend it in the files above this one.

use candle_core::backend::BackendDevice;
use candle_core::quantized::GgmlDType;
use candle_core::{CpuStorage, DType};
use rocm_safe::DeviceBuffer;

use crate::device::RocmDevice;
use crate::error::BackendError;
use crate::layout::invalid;
use crate::storage::RocmStorage;

/// Elements of padding after the last row (Candle's CUDA `MATRIX_ROW_PADDING`).
pub(super) const MATRIX_ROW_PADDING: usize = 512;
/// Threads per block of the Q5 dequantize kernels (Candle's `CUDA_DEQUANTIZE_BLOCK_SIZE`).
pub(super) const DEQUANTIZE_BLOCK_SIZE: usize = 256;

/// A quantized tensor's blocks on a ROCm device.
pub struct RocmQStorage {
    pub(super) blocks: Blocks,
    /// Bytes of blocks (without the padding).
    pub(super) len: usize,
    pub(super) dtype: GgmlDType,
    pub(super) device: RocmDevice,
}

/// Where the values live.
pub(super) enum Blocks {
    /// GGML blocks, then zeroed padding.
    Quantized(DeviceBuffer<u8>),
    /// F32, F16 or BF16 "blocks": plain values, held as an ordinary storage of that dtype.
    Float(RocmStorage),
}

/// The float dtype of a plain-value GGML type.
pub(super) fn float_dtype(dtype: GgmlDType) -> Option<DType> {
    match dtype {
        GgmlDType::F32 => Some(DType::F32),
        GgmlDType::F16 => Some(DType::F16),
        GgmlDType::BF16 => Some(DType::BF16),
        _ => None,
    }
}

/// Little-endian bytes of plain values as a host storage of `dtype` (f32, f16 or bf16).
pub(super) fn cpu_from_bytes(dtype: DType, bytes: &[u8]) -> Option<CpuStorage> {
    let two = || bytes.chunks_exact(2).map(|c| [c[0], c[1]]);
    Some(match dtype {
        DType::F32 => CpuStorage::F32(
            bytes
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect(),
        ),
        DType::F16 => CpuStorage::F16(two().map(half::f16::from_le_bytes).collect()),
        DType::BF16 => CpuStorage::BF16(two().map(half::bf16::from_le_bytes).collect()),
        _ => return None,
    })
}

/// The little-endian bytes of a host storage of f32, f16 or bf16.
pub(super) fn bytes_of(cpu: &CpuStorage) -> Option<Vec<u8>> {
    Some(match cpu {
        CpuStorage::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuStorage::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        CpuStorage::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        _ => return None,
    })
}

impl std::fmt::Debug for RocmQStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RocmQStorage({:?}, {} bytes, rocm:{})",
            self.dtype,
            self.len,
            self.device.ordinal()
        )
    }
}

impl RocmQStorage {
    /// Copies `data`, whole blocks of `dtype`, to the device.
    pub fn load(device: &RocmDevice, data: &[u8], dtype: GgmlDType) -> Result<Self, BackendError> {
        let (type_size, block_size) = (dtype.type_size(), dtype.block_size());
        if data.len() % type_size != 0 {
            return Err(invalid(
                "load_quantized",
                format_args!(
                    "{} bytes are not whole {dtype:?} blocks of {type_size} bytes: the tensor \
                     data is truncated or not of this type; check the GGUF file",
                    data.len()
                ),
            ));
        }
        let blocks = match float_dtype(dtype) {
            Some(float) => {
                let cpu = cpu_from_bytes(float, data)
                    .ok_or_else(|| invalid("load_quantized", "not a float type"))?;
                Blocks::Float(
                    <RocmDevice as BackendDevice>::storage_from_cpu_storage_owned(device, cpu)
                        .map_err(|e| invalid("load_quantized", e))?,
                )
            }
            None => {
                let padding = MATRIX_ROW_PADDING / block_size * type_size;
                let padded = data
                    .len()
                    .checked_add(padding)
                    .ok_or_else(|| invalid("load_quantized", "the padded size overflows usize"))?;
                let mut buf = device.zeros::<u8>(padded)?;
                if !data.is_empty() {
                    let mut head = buf.slice_mut(..data.len())?;
                    device.stream().memcpy_htod(data, &mut head)?;
                }
                Blocks::Quantized(buf)
            }
        };
        Ok(RocmQStorage {
            blocks,
            len: data.len(),
            dtype,
            device: device.clone(),
        })
    }

    /// The device holding the blocks.
    pub fn rocm_device(&self) -> &RocmDevice {
        &self.device
    }

    /// Checks that `elem_count` values fit the blocks held.
    pub(super) fn check_count(&self, op: &str, elem_count: usize) -> Result<(), BackendError> {
        let blocks = self.len / self.dtype.type_size();
        let held = blocks.saturating_mul(self.dtype.block_size());
        if elem_count > held || elem_count % self.dtype.block_size() != 0 {
            return Err(invalid(
                op,
                format_args!(
                    "{elem_count} values asked of {blocks} {:?} blocks ({held} values); the \
                     QTensor's shape does not match its data",
                    self.dtype
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_value_bytes_round_trip() {
        let f = CpuStorage::F32(vec![1.5, -0.0, f32::INFINITY, 3.25e-3]);
        let h = CpuStorage::F16(vec![half::f16::from_f32(-2.5), half::f16::MAX]);
        let b = CpuStorage::BF16(vec![half::bf16::from_f32(7.0)]);
        for (dtype, cpu) in [(DType::F32, f), (DType::F16, h), (DType::BF16, b)] {
            let bytes = bytes_of(&cpu).expect("a float storage");
            let back = cpu_from_bytes(dtype, &bytes).expect("a float dtype");
            assert_eq!(bytes_of(&back), Some(bytes), "{dtype:?}");
        }
        assert!(cpu_from_bytes(DType::U8, &[1, 2]).is_none());
        assert!(bytes_of(&CpuStorage::U8(vec![1])).is_none());
    }

    #[test]
    fn float_ggml_types_map_to_dtypes() {
        assert_eq!(float_dtype(GgmlDType::F32), Some(DType::F32));
        assert_eq!(float_dtype(GgmlDType::F16), Some(DType::F16));
        assert_eq!(float_dtype(GgmlDType::BF16), Some(DType::BF16));
        assert_eq!(float_dtype(GgmlDType::Q4K), None);
    }
}
