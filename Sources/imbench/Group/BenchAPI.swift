import AsyncHTTPClient
import Foundation
import IMGatewayAPI
import OpenAPIAsyncHTTPClient

/// The server API of the imgw a run started (the app backend's side): how `imbench group`
/// creates its groups and sees its members go offline.
struct BenchAPI: Sendable {
    /// The YAML that turns the API on in the gateway's configuration.
    static func configurationLines(port: Int, key: String, maxMembers: Int) -> [String] {
        [
            "api:",
            "  host: 127.0.0.1",
            "  port: \(port)",
            "  keys: [{name: imbench, key: \(key)}]",
            "groups:",
            "  max_members: \(maxMembers)",
        ]
    }

    private let client: Client
    private let http: HTTPClient

    /// A client of the API at `127.0.0.1:port` with `key`; ``shutdown()`` when done.
    init(port: Int, key: String) throws {
        guard let url = URL(string: "http://127.0.0.1:\(port)") else { throw BenchError("no URL for port \(port)") }
        http = HTTPClient(eventLoopGroupProvider: .singleton)
        let transport = AsyncHTTPClientTransport(configuration: .init(client: http, timeout: .seconds(30)))
        client = Client(serverURL: url, transport: transport, middlewares: [BearerKey(key: key)])
    }

    func shutdown() async {
        try? await http.shutdown()
    }

    /// `POST /v1/groups/{group}`: the group with its members.
    func createGroup(_ group: String, members: [String]) async throws {
        let answer = try await client.createGroup(path: .init(group: group), body: .json(.init(members: members)))
        guard case .created = answer else { throw BenchError("the server API did not create group \(group): \(answer)") }
    }

    /// `GET /v1/users/{user}/presence`: whether any device of `user` is online.
    func isOnline(_ user: String) async throws -> Bool {
        switch try await client.getPresence(path: .init(user: user)) {
        case .ok(let ok): return try ok.body.json.online
        case .notFound: return false
        case let other: throw BenchError("the server API did not answer the presence of \(user): \(other)")
        }
    }

    /// Returns once none of `users` has a device online (their gateway sessions have ended),
    /// asking every 20 ms; fails after `seconds`.
    func awaitOffline(_ users: [String], within seconds: Double) async throws {
        let deadline = MonotonicClock.nanoseconds() + UInt64(seconds * 1e9)
        var left = users
        while !left.isEmpty {
            var still: [String] = []
            for user in left where try await isOnline(user) { still.append(user) }
            left = still
            if left.isEmpty { return }
            guard MonotonicClock.nanoseconds() < deadline else {
                throw BenchError("\(left.count) member(s) still online \(Int(seconds)) s after they disconnected, e.g. \(left[0])")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
    }
}
