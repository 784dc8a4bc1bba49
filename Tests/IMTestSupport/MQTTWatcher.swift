import ChildProcesses
import Foundation
import IMGateway
import IMWire
import Logging
import Mosquitto
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// `mosquitto_sub -v` on a topic: the operator's view, line by line. Started through
/// ChildProcess (a clean signal mask: a child of Foundation's Process inherits the test
/// process's blocked SIGTERM and outlives the run).
package final class MQTTWatcher: Sendable {
    package let lines: Collector<String>
    package let process: ChildProcess

    package init(lines: Collector<String>, process: ChildProcess) {
        self.lines = lines
        self.process = process
    }

    deinit {
        process.signal(SIGKILL)
    }

    /// Ends mosquitto_sub. Call it (`defer`): the watcher's readers keep it alive until the
    /// test process exits.
    package func stop() {
        process.signal(SIGKILL)
    }

    package static func start(_ broker: some BrokerUnderTest, topic: String) async throws -> MQTTWatcher {
        let login = broker.credentials.map { ["-u", $0.username, "-P", $0.password] } ?? []
        let process = try spawn(
            "/usr/bin/mosquitto_sub",
            ["-h", "127.0.0.1", "-p", "\(broker.port)", "-v", "-V", "5", "-t", topic] + login)
        let lines = Collector(process.lines)
        // mosquitto_sub has subscribed once it prints a retained marker under the filter.
        let markerTopic = topic.replacingOccurrences(of: "#", with: "x-watch-marker")
        let marker = makeClient(broker)
        try await marker.connect()
        try await marker.publish(topic: markerTopic, string: "marker", qos: .atLeastOnce, retain: true)
        while try await lines.next(within: 10, "mosquitto_sub's marker line") != "\(markerTopic) marker" {}
        await marker.close()
        return MQTTWatcher(lines: lines, process: process)
    }
}
