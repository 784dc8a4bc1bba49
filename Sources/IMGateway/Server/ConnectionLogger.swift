import Logging

/// A device connection's logger: the gateway's, with the connection's peer (and, once
/// logged in, its user and device) added to each line it logs.
///
/// A `Logger` with metadata of its own keeps a copy of its handler and a metadata dictionary
/// (and the stream handler a rendering of it) for as long as it lives: for every connected
/// device, though connections log rarely. This one keeps the gateway's logger and three
/// strings, and builds the metadata only for a line that is logged.
struct ConnectionLogger: Sendable {
    private let base: Logger
    private let peer: String
    private var user: String?
    private var device: String?

    init(_ base: Logger, peer: String) {
        self.base = base
        self.peer = peer
    }

    /// From now on the lines name the device's user and device.
    mutating func identify(user: String, device: String) {
        self.user = user
        self.device = device
    }

    /// A `Logger` with the connection's metadata, for code that takes one (built on each
    /// call: for paths that are not taken per message).
    var logger: Logger {
        var logger = base
        for (key, value) in connectionMetadata { logger[metadataKey: key] = value }
        return logger
    }

    private var connectionMetadata: Logger.Metadata {
        var metadata: Logger.Metadata = ["peer": "\(peer)"]
        if let user { metadata["user"] = "\(user)" }
        if let device { metadata["device"] = "\(device)" }
        return metadata
    }

    func log(
        level: Logger.Level, _ message: @autoclosure () -> Logger.Message, metadata: @autoclosure () -> Logger.Metadata? = nil,
        file: String = #fileID, function: String = #function, line: UInt = #line
    ) {
        guard base.logLevel <= level else { return }
        let lineMetadata = connectionMetadata.merging(metadata() ?? [:]) { _, line in line }
        base.log(level: level, message(), metadata: lineMetadata, file: file, function: function, line: line)
    }

    func debug(
        _ message: @autoclosure () -> Logger.Message, metadata: @autoclosure () -> Logger.Metadata? = nil,
        file: String = #fileID, function: String = #function, line: UInt = #line
    ) {
        log(level: .debug, message(), metadata: metadata(), file: file, function: function, line: line)
    }

    func info(
        _ message: @autoclosure () -> Logger.Message, metadata: @autoclosure () -> Logger.Metadata? = nil,
        file: String = #fileID, function: String = #function, line: UInt = #line
    ) {
        log(level: .info, message(), metadata: metadata(), file: file, function: function, line: line)
    }

    func notice(
        _ message: @autoclosure () -> Logger.Message, metadata: @autoclosure () -> Logger.Metadata? = nil,
        file: String = #fileID, function: String = #function, line: UInt = #line
    ) {
        log(level: .notice, message(), metadata: metadata(), file: file, function: function, line: line)
    }

    func warning(
        _ message: @autoclosure () -> Logger.Message, metadata: @autoclosure () -> Logger.Metadata? = nil,
        file: String = #fileID, function: String = #function, line: UInt = #line
    ) {
        log(level: .warning, message(), metadata: metadata(), file: file, function: function, line: line)
    }

    func error(
        _ message: @autoclosure () -> Logger.Message, metadata: @autoclosure () -> Logger.Metadata? = nil,
        file: String = #fileID, function: String = #function, line: UInt = #line
    ) {
        log(level: .error, message(), metadata: metadata(), file: file, function: function, line: line)
    }
}
