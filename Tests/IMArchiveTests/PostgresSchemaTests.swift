@testable import IMArchive
import Testing

/// Which steps of the PostgreSQL ladder a gateway runs, from what `imgw_meta` records (the
/// statements themselves run against a real server in IntegrationTests' PostgresArchiveTests).
@Suite("PostgreSQL schema versions")
struct PostgresSchemaTests {
    @Test("the ladder climbs by one from 1 to the current version")
    func ladder() {
        #expect(PostgresSchema.ladder.map(\.version) == Array(1...PostgresSchema.current))
        #expect(PostgresSchema.current == 4)
    }

    @Test("a new database gets every step; tables at a version get the steps above it; current tables none")
    func steps() throws {
        #expect(try PostgresSchema.steps(recorded: nil, hasTables: false).map(\.version) == [1, 2, 3, 4])
        #expect(try PostgresSchema.steps(recorded: "1", hasTables: true).map(\.version) == [2, 3, 4])
        #expect(try PostgresSchema.steps(recorded: "3", hasTables: true).map(\.version) == [4])
        #expect(try PostgresSchema.steps(recorded: "4", hasTables: true).isEmpty)
    }

    @Test("a newer version, one that is not a version, and imgw tables without one are corrupt, saying which", arguments: [
        ("5", true, "schema 5, written by a newer imgw (this one reads schemas 1 to 4)"),
        ("three", true, "records schema \"three\", which is not a version"),
        ("0", true, "records schema \"0\", which is not a version"),
        (nil, true, "imgw_* tables but imgw_meta records no schema version"),
    ] as [(String?, Bool, String)])
    func refused(_ recorded: String?, _ hasTables: Bool, _ message: String) {
        #expect {
            _ = try PostgresSchema.steps(recorded: recorded, hasTables: hasTables)
        } throws: { error in
            guard let error = error as? ArchiveError else { return false }
            return error.code == .corrupt && error.message.contains(message)
        }
    }
}
