import Foundation
import IMWire
import NIOCore

extension ProtocolDocument {
    static func vectors(_ file: VectorFile) -> String {
        var out: [String] = []
        var section = ""
        for vector in file.vectors {
            if vector.section != section {
                section = vector.section
                out.append("#### \(section)\n")
            }
            out.append("##### `\(vector.name)`: \(vector.title)\n")
            out.append("\(vector.direction). \(vector.description)\n")
            out.append("```text\n" + self.annotated(vector) + "\n```\n")
            out.append("Frame (\(vector.hex.count / 2) bytes):\n")
            out.append("```text\n" + self.wrap(vector.hex) + "\n```\n")
        }
        return out.joined(separator: "\n").trimmingCharacters(in: .newlines)
    }

    static func malformedVectors(_ file: VectorFile) -> String {
        var out: [String] = [
            "| Vector | Refused by | Code | Closes |", "|---|---|---|---|",
        ]
        for v in file.malformed {
            out.append("| [`\(v.name)`](#malformed-\(v.name)) \(v.title) | \(v.stage == "frame" ? "frame decoder" : "message") | \(v.errorCode) \(v.errorName) | \(v.closesConnection ? "yes" : "no") |")
        }
        out.append("")
        for v in file.malformed {
            out.append("<a id=\"malformed-\(v.name)\"></a>\n##### `\(v.name)`: \(v.title)\n")
            out.append("\(v.description) Answer: \(v.errorName) (\(v.errorCode))\(v.closesConnection ? ", then close" : ", connection stays open"). Detail: `\(v.detail)`.\n")
            out.append("```text\n" + self.wrap(v.hex) + "\n```\n")
        }
        return out.joined(separator: "\n").trimmingCharacters(in: .newlines)
    }

    /// 64 bytes per line.
    static func wrap(_ hex: String) -> String {
        var lines: [String] = []
        var rest = Substring(hex)
        while !rest.isEmpty {
            lines.append(String(rest.prefix(128)))
            rest = rest.dropFirst(128)
        }
        return lines.joined(separator: "\n")
    }

    /// Header and items, each as a comment line and its bytes.
    static func annotated(_ vector: FrameVector) -> String {
        let h = vector.header
        let hex = vector.hex
        func field(_ from: Int, _ length: Int) -> String {
            let start = hex.index(hex.startIndex, offsetBy: from * 2)
            return String(hex[start..<hex.index(start, offsetBy: length * 2)])
        }
        var lines = [
            "# header: \(h.typeName), sequence \(self.number(h.sequence)), timestamp \(h.timestamp), encrypt \(h.encrypt), compress \(h.compress), session \(self.number(h.session)), body \(h.bodyLength) bytes, CRC \(h.crc32)",
            [field(0, 4), field(4, 1), field(5, 1), field(6, 2), field(8, 4), field(12, 4), field(16, 1), field(17, 1),
             field(18, 2), field(20, 4), field(24, 4)].joined(separator: " "),
        ]
        if h.compress == 1 {
            lines.append("# zlib stream (\(h.bodyLength) bytes)")
            lines.append(self.wrapValue(String(hex.dropFirst(IMWire.headerLength * 2)), indent: ""))
            lines.append("# inflated body:")
        }
        if let raw = vector.rawBody {
            lines.append("# seed ACK body: acknowledged sequence (u32), not TLV")
            lines.append(raw)
        }
        for item in vector.items ?? [] { self.annotate(item, depth: 0, into: &lines) }
        return lines.joined(separator: "\n")
    }

    /// Decimal, with the hex form too when that is easier to read.
    static func number<T: BinaryInteger>(_ value: T) -> String {
        value < 10_000 ? String(value) : "\(value) (0x\(hexString(value, width: MemoryLayout<T>.size * 2)))"
    }

    static func annotate(_ item: VectorItem, depth: Int, into lines: inout [String]) {
        let indent = String(repeating: "  ", count: depth)
        var writer = TLVWriter()
        try! item.write(to: &writer)
        let bytes = hexString(writer.buffer)
        let tag = String(bytes.prefix(4))
        let length = String(bytes.dropFirst(4).prefix(8))
        if item.items != nil {
            let count = item.items!.count
            lines.append("\(indent)# \(item.name) (\(count) item\(count == 1 ? "" : "s"))")
            lines.append("\(indent)\(tag) \(length)")
            for child in item.items! { self.annotate(child, depth: depth + 1, into: &lines) }
            return
        }
        lines.append("\(indent)# \(item.name) (\(item.type)) = \(self.display(item))")
        let value = String(bytes.dropFirst(12))
        lines.append("\(indent)\(tag) \(length) " + self.wrapValue(value, indent: indent + String(repeating: " ", count: 14)))
    }

    /// 32 value bytes per line, continuation lines indented.
    static func wrapValue(_ hex: String, indent: String) -> String {
        var parts: [String] = []
        var rest = Substring(hex)
        repeat {
            parts.append(String(rest.prefix(64)))
            rest = rest.dropFirst(64)
        } while !rest.isEmpty
        return parts.joined(separator: "\n" + indent)
    }

    static func display(_ item: VectorItem) -> String {
        switch item.value {
        case .unsigned(let v):
            if item.name == "OP", let name = IMOperation(UInt16(v)).name { return "0x\(hexString(v, width: 4)) \(name)" }
            if item.name == "ERROR_CODE", let name = IMErrorCode(UInt16(v)).name { return "\(v) \(name)" }
            return String(v)
        case .signed(let v): return String(v)
        case .double(let v): return String(v)
        case .string(let s) where item.type == "bytes": return "\(s.count / 2) bytes"
        case .string(let s):
            let short = s.count > 60 ? String(s.prefix(57)) + "..." : s
            return "\"" + short.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
        case .version(let major, let minor, let features): return "version \(major).\(minor), features 0x\(hexString(features, width: 4))"
        case nil: return ""
        }
    }
}
