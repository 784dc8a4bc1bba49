import LocalPostgres

/// A PostgreSQL server for one test (see `PostgresServer`): on a free port, stopped and its
/// directory removed when the test ends.
package typealias TestPostgres = PostgresServer

extension PostgresServer {
    /// Makes a cluster, starts the server and creates the database; returns once it accepts
    /// connections. Stopped (and its directory removed) when the test ends.
    package static func start(_ options: Options = Options()) async throws -> PostgresServer {
        try await start(options, port: freePort(), cleanup: { stop in TestResources.track(stop) })
    }
}
