import Foundation
import Testing

/// Every libdbus call goes through one file, `Sources/DBusBinding/LibDBus.swift`
/// (as swift-system puts every system call behind one): no `dbus_`
/// identifier, and no `import CDBus`, in the code of any other source file.
/// Comments and string literals may name libdbus' functions.
@Suite("libdbus is called from one seam file", .timeLimit(.minutes(2)))
struct LibDBusSeamTests {
    static let root = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let seam = "Sources/DBusBinding/LibDBus.swift"

    /// Every Swift source file of the package, as a path from the root.
    static func sourceFiles() throws -> [String] {
        let sources = root.appendingPathComponent("Sources")
        guard let walker = FileManager.default.enumerator(atPath: sources.path) else {
            throw CocoaError(.fileReadNoSuchFile)
        }
        return walker.compactMap { $0 as? String }.filter { $0.hasSuffix(".swift") }.map { "Sources/" + $0 }.sorted()
    }

    static func read(_ path: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(path), encoding: .utf8)
    }

    /// `dbus_` identifiers in the code of `source` (comments and string
    /// literals left out), each with its line.
    static func libdbusIdentifiers(in source: String) -> [(line: Int, name: String)] {
        var found: [(Int, String)] = []
        for (index, line) in SwiftCode.withoutCommentsAndStrings(source).split(
            separator: "\n", omittingEmptySubsequences: false
        ).enumerated() {
            let bytes = Array(line.utf8)
            func isIdentifier(_ byte: UInt8) -> Bool {
                byte == UInt8(ascii: "_") || (byte >= 48 && byte <= 57) || ((byte | 0x20) >= 97 && (byte | 0x20) <= 122)
            }
            let prefix = Array("dbus_".utf8)
            var start = 0
            while start + prefix.count <= bytes.count {
                guard Array(bytes[start..<start + prefix.count]) == prefix,
                    start == 0 || !isIdentifier(bytes[start - 1])
                else {
                    start += 1
                    continue
                }
                var end = start + prefix.count
                while end < bytes.count, isIdentifier(bytes[end]) { end += 1 }
                found.append((index + 1, String(decoding: bytes[start..<end], as: UTF8.self)))
                start = end
            }
        }
        return found
    }

    @Test func noLibdbusIdentifierOutsideTheSeam() throws {
        let files = try Self.sourceFiles()
        #expect(files.contains(Self.seam))
        #expect(files.count > 20, "the walk found the sources: \(files.count) files")
        var outside: [String] = []
        for file in files where file != Self.seam {
            for (line, name) in Self.libdbusIdentifiers(in: try Self.read(file)) {
                outside.append("\(file):\(line): \(name)")
            }
        }
        #expect(outside.isEmpty, "call libdbus through LibDBus.swift:\n\(outside.joined(separator: "\n"))")
    }

    @Test func onlyTheSeamImportsCDBus() throws {
        var importers: [String] = []
        for file in try Self.sourceFiles() {
            let code = SwiftCode.withoutCommentsAndStrings(try Self.read(file))
            let imports = code.split(separator: "\n").contains { line in
                let words = line.split(whereSeparator: \.isWhitespace)
                return words.contains("import") && words.last == "CDBus"
            }
            if imports { importers.append(file) }
        }
        #expect(importers == [Self.seam])
    }

    @Test func theSeamHoldsTheCalls() throws {
        let names = Set(Self.libdbusIdentifiers(in: try Self.read(Self.seam)).map(\.name))
        for expected in [
            "dbus_connection_pop_message", "dbus_connection_send", "dbus_message_iter_get_arg_type",
            "dbus_message_iter_append_basic", "dbus_validate_path", "dbus_threads_init_default", "dbus_watch_handle",
        ] {
            #expect(names.contains(expected), "\(expected) is called in the seam")
        }
    }

    /// Once libdbus has authenticated, the binding reads the socket
    /// (ConnectionCore.open, docs/dbus-binding.md "Reading the socket"), so
    /// libdbus must never read again: a byte it took would be lost to the
    /// binding's framing. These libdbus calls read (or block reading) and
    /// are not in the seam at all; `dbus_connection_read_write` is called
    /// only by `LibDBus.authenticate`, before any message exists; and
    /// `dbus_bus_register` and `dbus_connection_pop_message` only serve
    /// `BEACONBENCH_DBUS_READER=libdbus`, where libdbus reads as before.
    static let readingCalls = [
        "dbus_connection_flush", "dbus_connection_read_write_dispatch", "dbus_connection_dispatch",
        "dbus_connection_send_with_reply", "dbus_connection_send_with_reply_and_block",
        "dbus_connection_borrow_message", "dbus_pending_call_block", "dbus_bus_add_match", "dbus_bus_remove_match",
        "dbus_bus_request_name", "dbus_bus_release_name", "dbus_bus_name_has_owner", "dbus_bus_get_unix_user",
        "dbus_bus_get_id", "dbus_bus_start_service_by_name", "dbus_bus_get", "dbus_bus_get_private",
        "dbus_connection_open", "dbus_connection_open_private_with_main_loop",
    ]

    @Test func nothingReadsTheSocketBehindTheBindingsBack() throws {
        let seam = try Self.read(Self.seam)
        let names = Self.libdbusIdentifiers(in: seam)
        for (line, name) in names where Self.readingCalls.contains(name) {
            Issue.record("\(Self.seam):\(line): \(name) reads the socket the binding owns")
        }
        // read_write: only inside `authenticate`.
        let lines = SwiftCode.withoutCommentsAndStrings(seam).split(separator: "\n", omittingEmptySubsequences: false)
        func function(around line: Int) -> String? {
            lines[..<line].last { $0.contains("func ") }.map(String.init)
        }
        let readWrites = names.filter { $0.name == "dbus_connection_read_write" }
        #expect(readWrites.count == 1)
        for (line, _) in readWrites {
            #expect(function(around: line)?.contains("func authenticate(") == true, "line \(line)")
        }
        for (call, owner) in [
            ("dbus_bus_register", "func busRegister("), ("dbus_connection_pop_message", "func connectionPopMessage("),
        ] {
            let uses = names.filter { $0.name == call }
            #expect(uses.count == 1, "\(call) is called once")
            for (line, _) in uses {
                #expect(function(around: line)?.contains(owner) == true, "\(call) at line \(line)")
            }
        }
        // And outside the seam, the two old reading functions serve only the
        // libdbus reader: they appear in ConnectionCore alone.
        for file in try Self.sourceFiles() where file != Self.seam {
            let code = SwiftCode.withoutCommentsAndStrings(try Self.read(file))
            for name in ["LibDBus.busRegister", "LibDBus.connectionPopMessage", "LibDBus.authenticate"]
            where code.contains(name) {
                #expect(file == "Sources/DBusBinding/ConnectionCore.swift", "\(name) in \(file)")
            }
        }
    }

    /// The scanner reads code, not comments or strings, and finds what
    /// hides in an interpolation.
    @Test func theScannerReadsOnlyCode() {
        let source = #"""
            import CDBus
            // dbus_in_a_comment()
            /* dbus_in_a_block /* nested dbus_nested */ still dbus_comment */
            let a = "dbus_in_a_string \(dbus_in_an_interpolation(1, "dbus_inner_string")) done"
            let b = #"dbus_in_a_raw_string \(not_an_interpolation) "quoted" "#
            let c = """
                dbus_in_a_multiline_string "quoted"
                """
            let d = get_dbus_method() + dbus_real_call(x)
            """#
        let found = Self.libdbusIdentifiers(in: source)
        #expect(found.map(\.name) == ["dbus_in_an_interpolation", "dbus_real_call"])
        #expect(found.map(\.line) == [4, 9])
    }
}

/// Swift source with comments and string literals blanked (line breaks
/// kept), interpolations kept as code.
enum SwiftCode {
    private enum Mode {
        case code(parentheses: Int)
        case string(multiline: Bool, hashes: Int)
    }

    static func withoutCommentsAndStrings(_ source: String) -> String {
        let text = Array(source.utf8)
        var out: [UInt8] = []
        out.reserveCapacity(text.count)
        var modes: [Mode] = [.code(parentheses: 0)]
        var index = 0
        func at(_ offset: Int) -> UInt8? { index + offset < text.count ? text[index + offset] : nil }
        func starts(_ bytes: [UInt8], at offset: Int = 0) -> Bool {
            bytes.indices.allSatisfy { at(offset + $0) == bytes[$0] }
        }
        func blank(_ count: Int) {
            for _ in 0..<count {
                guard index < text.count else { return }
                out.append(text[index] == UInt8(ascii: "\n") ? UInt8(ascii: "\n") : UInt8(ascii: " "))
                index += 1
            }
        }
        let quote = UInt8(ascii: "\""), hash = UInt8(ascii: "#"), backslash = UInt8(ascii: "\\")
        while index < text.count {
            switch modes[modes.count - 1] {
            case .code(let parentheses):
                if starts(Array("//".utf8)) {
                    while index < text.count, text[index] != UInt8(ascii: "\n") { blank(1) }
                } else if starts(Array("/*".utf8)) {
                    var depth = 0
                    repeat {
                        if starts(Array("/*".utf8)) {
                            depth += 1
                            blank(2)
                        } else if starts(Array("*/".utf8)) {
                            depth -= 1
                            blank(2)
                        } else {
                            blank(1)
                        }
                    } while depth > 0 && index < text.count
                } else if text[index] == quote || text[index] == hash {
                    var hashes = 0
                    while at(hashes) == hash { hashes += 1 }
                    guard at(hashes) == quote else {
                        out.append(text[index])
                        index += 1
                        continue
                    }
                    let multiline = starts([quote, quote, quote], at: hashes)
                    blank(hashes + (multiline ? 3 : 1))
                    modes.append(.string(multiline: multiline, hashes: hashes))
                } else if text[index] == UInt8(ascii: "(") {
                    modes[modes.count - 1] = .code(parentheses: parentheses + 1)
                    out.append(text[index])
                    index += 1
                } else if text[index] == UInt8(ascii: ")") {
                    if parentheses == 0, modes.count > 1 {
                        modes.removeLast()  // the end of an interpolation
                        blank(1)
                    } else {
                        modes[modes.count - 1] = .code(parentheses: max(0, parentheses - 1))
                        out.append(text[index])
                        index += 1
                    }
                } else {
                    out.append(text[index])
                    index += 1
                }
            case .string(let multiline, let hashes):
                let escape = [backslash] + Array(repeating: hash, count: hashes)
                let close = Array(repeating: quote, count: multiline ? 3 : 1) + Array(repeating: hash, count: hashes)
                if starts(escape), at(escape.count) == UInt8(ascii: "(") {
                    blank(escape.count + 1)
                    modes.append(.code(parentheses: 0))
                } else if starts(escape) {
                    blank(escape.count + 1)
                } else if starts(close) {
                    blank(close.count)
                    modes.removeLast()
                } else {
                    blank(1)
                }
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
