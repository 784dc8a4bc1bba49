import CRocksDB

/// Puts gathered to be written at once by ``RocksDBStore/write(_:)`` (one WAL record, all or
/// nothing). RocksDB copies each key and value into the batch, so the caller may reuse its
/// buffers. Used from one task; cleared to be filled again.
final class RocksDBWriteBatch {
    /// The C batch, for the store's write.
    let handle: OpaquePointer

    init() {
        handle = rocksdb_writebatch_create()
    }

    deinit { rocksdb_writebatch_destroy(handle) }

    /// Records in the batch.
    var count: Int { Int(rocksdb_writebatch_count(handle)) }

    /// Sets `key` to `value` (an insert, or an overwrite of what was there).
    func put(_ key: [UInt8], _ value: [UInt8]) {
        key.withUnsafeBytes { key in
            value.withUnsafeBytes { value in
                rocksdb_writebatch_put(
                    handle, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count,
                    value.baseAddress?.assumingMemoryBound(to: CChar.self), value.count)
            }
        }
    }

    /// Empties the batch (its memory is kept).
    func clear() { rocksdb_writebatch_clear(handle) }
}
