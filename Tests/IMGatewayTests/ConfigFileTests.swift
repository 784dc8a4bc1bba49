import Foundation
import IMGateway
import Testing

/// `config/imgw.yaml` documents every key; these tests keep it and the code in step.
@Suite("config/imgw.yaml")
struct ConfigFileTests {
    static let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../config/imgw.yaml").standardized.path

    static func text() throws -> String { try String(contentsOfFile: path, encoding: .utf8) }

    /// The file with every commented-out setting (`# key: value`, indented like the key) enabled.
    static func uncommented() throws -> String {
        let setting = try Regex(#"^( *)# ( *[a-z_]+:( .*)?)$"#)
        return try self.text().split(separator: "\n", omittingEmptySubsequences: false).map { line in
            guard let match = line.wholeMatch(of: setting) else { return String(line) }
            return String(match.output[1].substring ?? "") + String(match.output[2].substring ?? "")
        }.joined(separator: "\n")
    }

    @Test("the file as shipped is exactly the defaults")
    func fileIsDefaults() throws {
        #expect(try GatewayConfiguration.load(from: Self.path) == GatewayConfiguration.defaults)
    }

    @Test("its commented-out examples are valid keys with valid values")
    func examplesAreValid() throws {
        let config = try GatewayConfiguration.parse(yaml: try Self.uncommented())
        #expect(config != GatewayConfiguration.defaults)
        #expect(config.listen.tls != nil && config.broker.url != nil && config.auth.issuer != nil)
    }

    @Test("every key of the configuration is documented in the file")
    func everyKeyDocumented() throws {
        let documented = try Self.keyPaths(ofBlockYAML: try Self.uncommented())
        let maximal = try GatewayConfiguration.parse(yaml: try Self.uncommented())
        // Every optional is set in `maximal` (or shows up as a null leaf the file lacks).
        let json = try JSONSerialization.jsonObject(with: try JSONEncoder().encode(maximal))
        let keys = Self.keyPaths(of: try #require(json as? [String: Any]))
        #expect(keys.count == 84)
        for key in keys.sorted() {
            #expect(documented.contains(key), "\(key) is missing from config/imgw.yaml")
        }
        // And nothing in the file is unknown (parse refuses unknown keys), so the sets agree.
        #expect(documented == keys)
    }

    @Test("every documented key has a comment above it or its section")
    func commented() throws {
        let lines = try Self.text().split(separator: "\n", omittingEmptySubsequences: false)
        let topLevel = lines.enumerated().filter { _, line in line.first?.isLetter == true }
        for (index, line) in topLevel {
            #expect(index > 0 && lines[index - 1].hasPrefix("#"), "\(line) has no comment")
        }
    }

    /// Leaf key paths of block-style YAML with two-space indents (the style of the file).
    static func keyPaths(ofBlockYAML yaml: String) throws -> Set<String> {
        let keyLine = try Regex(#"^( *)([a-z_]+):(.*)$"#)
        var stack: [String] = []
        var paths: Set<String> = []
        for line in yaml.split(separator: "\n") where !line.trimmingCharacters(in: .whitespaces).hasPrefix("#") {
            guard let match = line.wholeMatch(of: keyLine) else { continue }
            let depth = (match.output[1].substring?.count ?? 0) / 2
            let key = String(match.output[2].substring ?? "")
            let rest = (match.output[3].substring ?? "").trimmingCharacters(in: .whitespaces)
            stack = Array(stack.prefix(depth)) + [key]
            if !rest.isEmpty && !rest.hasPrefix("#") { paths.insert(stack.joined(separator: ".")) }
        }
        return paths
    }

    /// Leaf key paths, `a.b.c`; a null value is a leaf too.
    static func keyPaths(of dictionary: [String: Any], prefix: String = "") -> Set<String> {
        var paths: Set<String> = []
        for (key, value) in dictionary {
            let path = prefix.isEmpty ? key : "\(prefix).\(key)"
            if let nested = value as? [String: Any] {
                paths.formUnion(self.keyPaths(of: nested, prefix: path))
            } else {
                paths.insert(path)
            }
        }
        return paths
    }
}
