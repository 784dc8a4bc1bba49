// SHA256_Init/Update/Final are deprecated in OpenSSL 3 in favour of EVP, whose per-call
// provider lookups and context allocations cost several times the hash itself on a
// message of a few hundred bytes. They are still part of OpenSSL 3's API.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include "CMessageTag.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <string.h>

typedef struct {
    SHA256_CTX inner;
    SHA256_CTX outer;
} cmt_states;

_Static_assert(sizeof(cmt_states) <= sizeof(cmt_hmac_key), "cmt_hmac_key too small for two SHA256_CTX");

int cmt_hmac_key_init(cmt_hmac_key *key, const uint8_t *secret, size_t length) {
    if (length > SHA256_CBLOCK) return -1;
    uint8_t inner[SHA256_CBLOCK], outer[SHA256_CBLOCK];
    for (size_t index = 0; index < SHA256_CBLOCK; index++) {
        uint8_t byte = index < length ? secret[index] : 0;
        inner[index] = byte ^ 0x36;
        outer[index] = byte ^ 0x5c;
    }
    cmt_states *states = (cmt_states *)key->state;
    SHA256_Init(&states->inner);
    SHA256_Update(&states->inner, inner, sizeof inner);
    SHA256_Init(&states->outer);
    SHA256_Update(&states->outer, outer, sizeof outer);
    OPENSSL_cleanse(inner, sizeof inner);
    OPENSSL_cleanse(outer, sizeof outer);
    return 0;
}

void cmt_hmac(const cmt_hmac_key *key, const void *first, size_t first_length,
              const void *second, size_t second_length, uint8_t out[32]) {
    const cmt_states *states = (const cmt_states *)key->state;
    SHA256_CTX context = states->inner;
    SHA256_Update(&context, first, first_length);
    SHA256_Update(&context, second, second_length);
    uint8_t digest[SHA256_DIGEST_LENGTH];
    SHA256_Final(digest, &context);
    context = states->outer;
    SHA256_Update(&context, digest, sizeof digest);
    SHA256_Final(out, &context);
    OPENSSL_cleanse(&context, sizeof context);
}
