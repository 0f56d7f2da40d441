// attention/cache.h - part of attention.hip: writes new keys and values into a paged cache
// (`reshape_and_cache` of the paged-attention servers, for flash-attention's cache layout).
//
//   fa_cache_write_<T>(const T* key, const T* value, T* key_cache, T* value_cache,
//                      const int64_t* slots, uint32_t kv_heads, uint32_t d,
//                      uint64_t key_row, uint64_t key_head, uint64_t value_row,
//                      uint64_t value_head, uint64_t cache_block, uint64_t cache_row,
//                      uint64_t cache_head, uint32_t page, uint64_t num_slots)
// Token t's key row (kv_heads x d, strides key_row / key_head) goes to slot slots[t] of the
// cache: block slot / page, row slot % page (strides cache_block / cache_row / cache_head,
// shared by both caches); likewise its value, unless value_cache is null (one cache a call: keys
// only). A slot < 0 (padding) or >= num_slots is skipped.
// Launch: grid (tokens), block (FA_THREADS).
#pragma once

template <typename T>
__device__ __forceinline__ void fa_cache_write(const T *key, const T *value, T *key_cache, T *value_cache,
                                               const int64_t *slots, uint32_t kv_heads, uint32_t d,
                                               uint64_t key_row, uint64_t key_head, uint64_t value_row,
                                               uint64_t value_head, uint64_t cache_block, uint64_t cache_row,
                                               uint64_t cache_head, uint32_t page, uint64_t num_slots) {
    const uint64_t t = blockIdx.x;
    const int64_t slot = slots[t];
    if (slot < 0 || (uint64_t)slot >= num_slots) return;
    const uint64_t dst = ((uint64_t)slot / page) * cache_block + ((uint64_t)slot % page) * cache_row;
    for (uint32_t x = threadIdx.x; x < kv_heads * d; x += FA_THREADS) {
        const uint64_t h = x / d, e = x % d;
        key_cache[dst + h * cache_head + e] = key[t * key_row + h * key_head + e];
        if (value_cache) value_cache[dst + h * cache_head + e] = value[t * value_row + h * value_head + e];
    }
}

#define FA_CACHE_WRITE(T, TN)                                                                      \
    extern "C" __global__ void __launch_bounds__(FA_THREADS)                                       \
        fa_cache_write_##TN(const T *key, const T *value, T *key_cache, T *value_cache,            \
                            const int64_t *slots, uint32_t kv_heads, uint32_t d, uint64_t key_row, \
                            uint64_t key_head, uint64_t value_row, uint64_t value_head,            \
                            uint64_t cache_block, uint64_t cache_row, uint64_t cache_head,         \
                            uint32_t page, uint64_t num_slots) {                                   \
        fa_cache_write<T>(key, value, key_cache, value_cache, slots, kv_heads, d, key_row,         \
                          key_head, value_row, value_head, cache_block, cache_row, cache_head,     \
                          page, num_slots);                                                        \
    }
