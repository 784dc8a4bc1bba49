import CRocksDB

/// An iterator over a ``RocksDBStore``, within optional bounds: seeks, steps both ways, the
/// current key and value (copied out: RocksDB's own bytes are valid only until the next move).
///
/// It keeps its store open and owns its read options and the bytes of its bounds (the C API
/// keeps pointers to them, not copies), freed after the iterator. Like the store, it is used
/// from one task.
final class RocksDBIterator {
    private let store: RocksDBStore
    private let readOptions: OpaquePointer
    private let handle: OpaquePointer
    private let lowerBound: Bound?
    private let upperBound: Bound?

    /// Made by ``RocksDBStore/makeIterator(lowerBound:upperBound:)``.
    init(store: RocksDBStore, db: OpaquePointer, lowerBound: [UInt8]?, upperBound: [UInt8]?) {
        let readOptions = rocksdb_readoptions_create()!
        let lower = lowerBound.map(Bound.init)
        let upper = upperBound.map(Bound.init)
        if let lower { rocksdb_readoptions_set_iterate_lower_bound(readOptions, lower.bytes, lower.count) }
        if let upper { rocksdb_readoptions_set_iterate_upper_bound(readOptions, upper.bytes, upper.count) }
        self.store = store
        self.readOptions = readOptions
        self.lowerBound = lower
        self.upperBound = upper
        handle = rocksdb_create_iterator(db, readOptions)
    }

    deinit {
        rocksdb_iter_destroy(handle)
        rocksdb_readoptions_destroy(readOptions)
        lowerBound?.bytes.deallocate()
        upperBound?.bytes.deallocate()
        store.iteratorClosed()
    }

    /// Whether it stands on an entry (false past either end, or after an error: see
    /// ``checkStatus()``).
    var isValid: Bool { rocksdb_iter_valid(handle) != 0 }

    /// To the first key at or after `key`.
    func seek(_ key: [UInt8]) {
        key.withUnsafeBytes { rocksdb_iter_seek(handle, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
    }

    /// To the last key at or before `key`.
    func seekForPrevious(_ key: [UInt8]) {
        key.withUnsafeBytes { rocksdb_iter_seek_for_prev(handle, $0.baseAddress?.assumingMemoryBound(to: CChar.self), $0.count) }
    }

    func seekToFirst() { rocksdb_iter_seek_to_first(handle) }
    func seekToLast() { rocksdb_iter_seek_to_last(handle) }
    func next() { rocksdb_iter_next(handle) }
    func previous() { rocksdb_iter_prev(handle) }

    /// The current key; only while ``isValid``.
    var key: [UInt8] {
        var length = 0
        let bytes = rocksdb_iter_key(handle, &length)
        return Array(UnsafeRawBufferPointer(start: bytes, count: length))
    }

    /// The current value; only while ``isValid``.
    var value: [UInt8] {
        var length = 0
        let bytes = rocksdb_iter_value(handle, &length)
        return Array(UnsafeRawBufferPointer(start: bytes, count: length))
    }

    /// Throws what stopped the iterator early, if anything did (an invalid iterator is
    /// otherwise just past the end).
    func checkStatus() throws(RocksDBError) {
        try RocksDBError.checking({ .read(path: store.path, reason: $0) }) { rocksdb_iter_get_error(handle, $0) }
    }

    /// A bound's bytes, copied where the C API can point to them until the iterator goes.
    private struct Bound {
        let bytes: UnsafeMutablePointer<CChar>
        let count: Int

        init(_ key: [UInt8]) {
            let bytes = UnsafeMutablePointer<CChar>.allocate(capacity: max(1, key.count))
            key.withUnsafeBytes { key in
                if let source = key.baseAddress { UnsafeMutableRawPointer(bytes).copyMemory(from: source, byteCount: key.count) }
            }
            self.bytes = bytes
            count = key.count
        }
    }
}
