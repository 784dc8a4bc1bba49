import CRocksDB
import Foundation

/// A RocksDB database opened through its C API: write batches, iterators, point lookups, a
/// flush, properties. Every error string the C API returns is copied into a ``RocksDBError``
/// that says what was being done and where, then freed.
///
/// The C handles are opaque pointers that this object owns and destroys in ``close()`` (or when
/// it goes away). It is not `Sendable`: one task opens it, uses it and closes it, as the
/// archive's writer does. Iterators keep it alive; ``close()`` needs none to be open.
final class RocksDBStore {
    /// How a store is opened.
    struct Options: Sendable, Equatable {
        /// The block cache (LRU), MB.
        var blockCacheMB = 256
        /// One memtable, MB. `rocksdb_options_optimize_level_style_compaction` is given four
        /// times this as its memtable budget (from which it sizes level 1 and the SST files),
        /// then the memtable size is set to this.
        var writeBufferMB = 64
        /// The compression of levels 2 and deeper. Levels 0 and 1 stay uncompressed, as
        /// `optimize_level_style_compaction` lays them out (it would pick LZ4, else Snappy,
        /// for the deeper ones).
        var compression: Compression = .lz4
        /// Background threads for flushes and compactions (`rocksdb_options_increase_parallelism`).
        var parallelism = 2
        /// Whether each write waits for the WAL's fsync. Off: each batch is in the WAL (the
        /// operating system's page cache) when the write returns, like SQLite's
        /// synchronous=NORMAL; a crash of the process loses nothing, one of the machine may
        /// lose the last writes.
        var sync = false

        init(blockCacheMB: Int = 256, writeBufferMB: Int = 64, compression: Compression = .lz4, parallelism: Int = 2, sync: Bool = false) {
            self.blockCacheMB = blockCacheMB
            self.writeBufferMB = writeBufferMB
            self.compression = compression
            self.parallelism = parallelism
            self.sync = sync
        }
    }

    /// The block compressions `c.h` names that this tool offers.
    enum Compression: String, CaseIterable, Sendable {
        case none, snappy, lz4, zstd

        /// The C API's constant.
        var code: Int32 {
            switch self {
            case .none: Int32(rocksdb_no_compression)
            case .snappy: Int32(rocksdb_snappy_compression)
            case .lz4: Int32(rocksdb_lz4_compression)
            case .zstd: Int32(rocksdb_zstd_compression)
            }
        }
    }

    /// What the options came to once RocksDB's level-style tuning was applied, read back from
    /// the C options.
    struct Tuning: Sendable, Equatable {
        let compressionPerLevel: [Compression]
        let writeBufferSize: Int
        let maxWriteBufferNumber: Int
        let minWriteBufferNumberToMerge: Int
        let level0FileNumCompactionTrigger: Int
        let targetFileSizeBase: UInt64
        let maxBytesForLevelBase: UInt64
        let maxBackgroundJobs: Int
    }

    /// The database's directory.
    let path: String
    let options: Options
    let tuning: Tuning

    private var db: OpaquePointer?
    private let databaseOptions: OpaquePointer
    private let tableOptions: OpaquePointer
    private let cache: OpaquePointer
    private let writeOptions: OpaquePointer
    private let readOptions: OpaquePointer
    /// Iterators open on this store (each holds it).
    private var openIterators = 0

    private init(path: String, options: Options, tuning: Tuning, db: OpaquePointer, databaseOptions: OpaquePointer, tableOptions: OpaquePointer, cache: OpaquePointer) {
        self.path = path
        self.options = options
        self.tuning = tuning
        self.db = db
        self.databaseOptions = databaseOptions
        self.tableOptions = tableOptions
        self.cache = cache
        let writeOptions = rocksdb_writeoptions_create()!
        rocksdb_writeoptions_set_sync(writeOptions, options.sync ? 1 : 0)
        self.writeOptions = writeOptions
        readOptions = rocksdb_readoptions_create()
    }

    deinit { close() }

    /// Opens the database at `path`, a directory made if missing.
    static func open(path: String, options: Options = Options()) throws(RocksDBError) -> RocksDBStore {
        let databaseOptions = rocksdb_options_create()!
        rocksdb_options_set_create_if_missing(databaseOptions, 1)
        rocksdb_options_increase_parallelism(databaseOptions, Int32(options.parallelism))
        rocksdb_options_optimize_level_style_compaction(databaseOptions, UInt64(options.writeBufferMB * 4) << 20)
        rocksdb_options_set_write_buffer_size(databaseOptions, options.writeBufferMB << 20)
        let levels = Int(rocksdb_options_get_num_levels(databaseOptions))
        let perLevel = (0..<levels).map { $0 < 2 ? Compression.none : options.compression }
        rocksdb_options_set_compression_per_level(databaseOptions, perLevel.map(\.code), perLevel.count)
        rocksdb_options_set_compression(databaseOptions, options.compression.code)
        let cache = rocksdb_cache_create_lru(options.blockCacheMB << 20)!
        let tableOptions = rocksdb_block_based_options_create()!
        rocksdb_block_based_options_set_block_cache(tableOptions, cache)
        rocksdb_options_set_block_based_table_factory(databaseOptions, tableOptions)
        let tuning = Tuning(
            compressionPerLevel: perLevel,
            writeBufferSize: rocksdb_options_get_write_buffer_size(databaseOptions),
            maxWriteBufferNumber: Int(rocksdb_options_get_max_write_buffer_number(databaseOptions)),
            minWriteBufferNumberToMerge: Int(rocksdb_options_get_min_write_buffer_number_to_merge(databaseOptions)),
            level0FileNumCompactionTrigger: Int(rocksdb_options_get_level0_file_num_compaction_trigger(databaseOptions)),
            targetFileSizeBase: rocksdb_options_get_target_file_size_base(databaseOptions),
            maxBytesForLevelBase: rocksdb_options_get_max_bytes_for_level_base(databaseOptions),
            maxBackgroundJobs: Int(rocksdb_options_get_max_background_jobs(databaseOptions)))

        var message: UnsafeMutablePointer<CChar>?
        let db = rocksdb_open(databaseOptions, path, &message)
        guard let db, message == nil else {
            let reason = message.map { String(cString: $0) } ?? "no handle and no message"
            if let message { rocksdb_free(message) }
            if let db { rocksdb_close(db) }
            rocksdb_options_destroy(databaseOptions)
            rocksdb_block_based_options_destroy(tableOptions)
            rocksdb_cache_destroy(cache)
            throw .open(path: path, reason: reason)
        }
        return RocksDBStore(
            path: path, options: options, tuning: tuning, db: db, databaseOptions: databaseOptions, tableOptions: tableOptions, cache: cache)
    }

    /// Whether this librocksdb was built with `compression`. The C API tells only when a
    /// database is opened with it (`rocksdb_options_set_compression` accepts any constant),
    /// so a throwaway database is opened with it in a temporary directory: RocksDB refuses it
    /// there as "not linked with the binary" when it is missing. Any other failure is thrown.
    static func supports(_ compression: Compression) throws -> Bool {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("imbench-rocksdb-probe-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        // A Result, not `do throws(RocksDBError) { … } catch … where`: that form made Swift
        // 6.3.1's mandatory SIL pass (AllocBoxToStack) spin without end on this function.
        let opened = Result { () throws(RocksDBError) -> RocksDBStore in
            try open(path: directory.path, options: Options(blockCacheMB: 1, writeBufferMB: 1, compression: compression))
        }
        switch opened {
        case .success(let probe):
            probe.close()
            return true
        case .failure(let error) where error.reason.contains("not linked with the binary"):
            return false
        case .failure(let error):
            throw error
        }
    }

    /// Writes `batch` atomically (through the WAL, synced or not as ``Options/sync`` says).
    func write(_ batch: RocksDBWriteBatch) throws(RocksDBError) {
        let db = handle()
        try RocksDBError.checking({ .write(path: path, records: batch.count, reason: $0) }) {
            rocksdb_write(db, writeOptions, batch.handle, $0)
        }
    }

    /// The value of `key`, if it is there.
    func get(_ key: [UInt8]) throws(RocksDBError) -> [UInt8]? {
        let db = handle()
        var length = 0
        let value = try RocksDBError.checking({ .get(path: path, reason: $0) }) { error in
            key.withUnsafeBytes { key in
                rocksdb_get(db, readOptions, key.baseAddress?.assumingMemoryBound(to: CChar.self), key.count, &length, error)
            }
        }
        guard let value else { return nil }
        defer { rocksdb_free(value) }
        return Array(UnsafeRawBufferPointer(start: value, count: length))
    }

    /// An iterator over the keys in `lowerBound..<upperBound` (either end open when nil),
    /// positioned nowhere until a seek.
    func makeIterator(lowerBound: [UInt8]? = nil, upperBound: [UInt8]? = nil) -> RocksDBIterator {
        let iterator = RocksDBIterator(store: self, db: handle(), lowerBound: lowerBound, upperBound: upperBound)
        openIterators += 1
        return iterator
    }

    /// Called by an iterator as it goes.
    func iteratorClosed() {
        openIterators -= 1
    }

    /// Writes the memtables to SST files and waits for it.
    func flush() throws(RocksDBError) {
        let db = handle()
        let flushOptions = rocksdb_flushoptions_create()
        defer { rocksdb_flushoptions_destroy(flushOptions) }
        rocksdb_flushoptions_set_wait(flushOptions, 1)
        try RocksDBError.checking({ .flush(path: path, reason: $0) }) { rocksdb_flush(db, flushOptions, $0) }
    }

    /// An integer property (`rocksdb.total-sst-files-size`, `rocksdb.estimate-live-data-size`,
    /// …), nil when RocksDB does not know it.
    func property(_ name: String) -> UInt64? {
        var value: UInt64 = 0
        return rocksdb_property_int(handle(), name, &value) == 0 ? value : nil
    }

    /// A property as RocksDB writes it out (`rocksdb.num-files-at-level0`, `rocksdb.stats`, …),
    /// nil when RocksDB does not know it.
    func propertyText(_ name: String) -> String? {
        guard let value = rocksdb_property_value(handle(), name) else { return nil }
        defer { rocksdb_free(value) }
        return String(cString: value)
    }

    /// The sum of the sizes of the files in the database's directory (SST files, WAL, manifest,
    /// logs): what it takes on disk.
    func bytesOnDisk() -> Int {
        let manager = FileManager.default
        guard let names = try? manager.contentsOfDirectory(atPath: path) else { return 0 }
        return names.reduce(0) { total, name in
            let attributes = try? manager.attributesOfItem(atPath: path + "/" + name)
            guard attributes?[.type] as? FileAttributeType == .typeRegular else { return total }
            return total + ((attributes?[.size] as? NSNumber)?.intValue ?? 0)
        }
    }

    /// The RocksDB version that wrote the database's newest OPTIONS file (`rocksdb_version=`;
    /// the C API has no version call).
    func writtenVersion() -> String? {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: path) else { return nil }
        let newest = names.filter { $0.hasPrefix("OPTIONS-") && !$0.hasSuffix(".dbtmp") }.max {
            (Int($0.dropFirst(8)) ?? 0) < (Int($1.dropFirst(8)) ?? 0)
        }
        guard let newest, let text = try? String(contentsOfFile: path + "/" + newest, encoding: .utf8) else { return nil }
        let line = text.split(separator: "\n").first { $0.trimmingCharacters(in: .whitespaces).hasPrefix("rocksdb_version=") }
        return line.map { String($0.trimmingCharacters(in: .whitespaces).dropFirst("rocksdb_version=".count)) }
    }

    /// Closes the database (what is in the memtables stays in the WAL, replayed at the next
    /// open) and frees the C handles. Every iterator must be gone. Closing twice does nothing.
    func close() {
        guard let db else { return }
        precondition(openIterators == 0, "RocksDBStore \(path) closed with \(openIterators) iterator(s) open")
        rocksdb_close(db)
        self.db = nil
        rocksdb_writeoptions_destroy(writeOptions)
        rocksdb_readoptions_destroy(readOptions)
        rocksdb_options_destroy(databaseOptions)
        rocksdb_block_based_options_destroy(tableOptions)
        rocksdb_cache_destroy(cache)
    }

    private func handle() -> OpaquePointer {
        guard let db else { preconditionFailure("RocksDBStore \(path) used after close()") }
        return db
    }
}
