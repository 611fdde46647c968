//! Error names and descriptions.

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::ffi::{c_char, c_int};

use super::*;
use crate::CuResult;

// -- errors -----------------------------------------------------------------------------------

fn error_text(error: c_int) -> Option<(&'static [u8], &'static [u8])> {
    Some(match error {
        0 => (b"CUDA_SUCCESS\0", b"no error\0"),
        1 => (b"CUDA_ERROR_INVALID_VALUE\0", b"invalid argument\0"),
        2 => (b"CUDA_ERROR_OUT_OF_MEMORY\0", b"out of memory\0"),
        3 => (b"CUDA_ERROR_NOT_INITIALIZED\0", b"initialization error\0"),
        100 => (
            b"CUDA_ERROR_NO_DEVICE\0",
            b"no CUDA-capable device is detected\0",
        ),
        101 => (b"CUDA_ERROR_INVALID_DEVICE\0", b"invalid device ordinal\0"),
        201 => (b"CUDA_ERROR_INVALID_CONTEXT\0", b"invalid device context\0"),
        400 => (b"CUDA_ERROR_INVALID_HANDLE\0", b"invalid resource handle\0"),
        401 => (
            b"CUDA_ERROR_ILLEGAL_STATE\0",
            b"the operation cannot be performed in the present state\0",
        ),
        500 => (b"CUDA_ERROR_NOT_FOUND\0", b"named symbol not found\0"),
        600 => (b"CUDA_ERROR_NOT_READY\0", b"device not ready\0"),
        900 => (
            b"CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED\0",
            b"operation not permitted when stream is capturing\0",
        ),
        901 => (
            b"CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\0",
            b"operation failed due to a previous error during capture\0",
        ),
        906 => (
            b"CUDA_ERROR_STREAM_CAPTURE_IMPLICIT\0",
            b"operation would make the legacy stream depend on a capturing blocking stream\0",
        ),
        999 => (b"CUDA_ERROR_UNKNOWN\0", b"unknown error\0"),
        _ => return None,
    })
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: c_int, text: *mut *const c_char) -> CuResult {
    match error_text(error) {
        Some((name, _)) => code(out(text, name.as_ptr().cast())),
        None => CuResult::InvalidValue,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: c_int, text: *mut *const c_char) -> CuResult {
    match error_text(error) {
        Some((_, description)) => code(out(text, description.as_ptr().cast())),
        None => CuResult::InvalidValue,
    }
}
