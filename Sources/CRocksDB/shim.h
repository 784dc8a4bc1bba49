#ifndef IMGATEWAY_CROCKSDB_SHIM_H
#define IMGATEWAY_CROCKSDB_SHIM_H

// RocksDB's C API (Debian's librocksdb-dev), for `imbench rocksdb` only: imgw does not link it.
#include <rocksdb/c.h>

#endif
