import CRocksDB

/// What RocksDB's C API refused, with what was being done and where: RocksDB's own message (the
/// C API's error string, copied, then freed with `rocksdb_free`).
enum RocksDBError: Error, Equatable, CustomStringConvertible {
    /// `rocksdb_open` failed at `path` (a path that is no directory, a lock another process
    /// holds, options refused, such as a compression this library was built without).
    case open(path: String, reason: String)
    /// A write batch of `records` records was refused.
    case write(path: String, records: Int, reason: String)
    /// An iterator stopped on an error (its status after a seek or a step).
    case read(path: String, reason: String)
    /// A point lookup (`rocksdb_get`) failed.
    case get(path: String, reason: String)
    /// A flush of the memtables to SST files failed.
    case flush(path: String, reason: String)

    var description: String {
        switch self {
        case .open(let path, let reason): "RocksDB: cannot open \(path): \(reason)"
        case .write(let path, let records, let reason): "RocksDB: a batch of \(records) records to \(path) failed: \(reason)"
        case .read(let path, let reason): "RocksDB: an iterator over \(path) failed: \(reason)"
        case .get(let path, let reason): "RocksDB: a lookup in \(path) failed: \(reason)"
        case .flush(let path, let reason): "RocksDB: the flush of \(path) failed: \(reason)"
        }
    }

    /// RocksDB's message, whatever was being done.
    var reason: String {
        switch self {
        case .open(_, let reason), .write(_, _, let reason), .read(_, let reason), .get(_, let reason), .flush(_, let reason): reason
        }
    }

    /// Calls `call` with an error slot, as the C API's `char** errptr`; when RocksDB filled it,
    /// its message is copied, freed and thrown as `error(message)`.
    static func checking<Result>(
        _ error: (String) -> RocksDBError, _ call: (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) -> Result
    ) throws(RocksDBError) -> Result {
        var message: UnsafeMutablePointer<CChar>?
        let result = call(&message)
        if let message {
            let text = String(cString: message)
            rocksdb_free(message)
            throw error(text)
        }
        return result
    }
}
