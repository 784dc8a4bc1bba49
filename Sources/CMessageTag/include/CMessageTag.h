#ifndef CMESSAGETAG_H
#define CMESSAGETAG_H

#include <stddef.h>
#include <stdint.h>

/// HMAC-SHA256 (RFC 2104) with the hash states after the key blocks computed once, over
/// OpenSSL's SHA-256 (libcrypto, which libmosquitto loads anyway). Each tag is two hash
/// runs on stack copies of those states: no allocation, and SHA-NI where the CPU has it.
typedef struct {
    /// Two SHA256_CTX (inner, outer), kept opaque here so that Swift sees no OpenSSL types.
    uint64_t state[32];
} cmt_hmac_key;

/// Sets up `key` for HMAC with `secret` (at most 64 bytes). Returns 0, or -1 if the
/// secret is longer or OpenSSL's context would not fit.
int cmt_hmac_key_init(cmt_hmac_key *key, const uint8_t *secret, size_t length);

/// HMAC(key, first || second) into `out` (32 bytes).
void cmt_hmac(const cmt_hmac_key *key, const void *first, size_t first_length,
              const void *second, size_t second_length, uint8_t out[32]);

#endif
