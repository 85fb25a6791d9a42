import Foundation
import Testing

/// The console's rule for output: a command hands result values to the
/// `Renderer` (Sources/Console/Output), which alone decides between JSON
/// and lines for people. So no code of the console outside Output reads
/// an identifier `json`, except where `--json` is parsed (the invocation,
/// a line's grammar, the batch parser) and the terminal that holds the
/// run's flag. Comments and string literals do not count; code inside a
/// string's interpolation does.
@Suite("output goes through the renderer", .timeLimit(.minutes(2)))
struct OutputRuleTests {
    static let console = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/Console")

    /// Where `json` may be read: the renderer's directory, and the files
    /// that parse `--json` or hold what was parsed.
    static let allowed = ["Invocation.swift", "Terminal.swift", "BatchParser.swift", "Commands/LineGrammar.swift"]

    static func sourceFiles() -> [String] {
        (FileManager.default.enumerator(atPath: console.path)?.compactMap { $0 as? String } ?? [])
            .filter { $0.hasSuffix(".swift") }.sorted()
    }

    @Test func noCodeOutsideTheRendererDecidesOnJSON() throws {
        let files = Self.sourceFiles()
        #expect(files.count > 30, "\(Self.console.path)")
        #expect(files.contains { $0.hasPrefix("Output/") } && files.contains("Output/Renderer.swift"))
        var offences: [String] = []
        for file in files where !file.hasPrefix("Output/") && !Self.allowed.contains(file) {
            let text = try String(contentsOf: Self.console.appendingPathComponent(file), encoding: .utf8)
            for (line, identifier) in SwiftCode.identifiers(text) where identifier == "json" {
                offences.append("Sources/Console/\(file):\(line)")
            }
        }
        #expect(
            offences.isEmpty,
            "code outside Sources/Console/Output reads `json`: hand the Renderer a result value instead (\(offences))")
    }

    /// The check finds what it looks for: `if json`, `\.json`, `session.json`,
    /// a label, code in an interpolation; not a comment, a string or a
    /// longer name.
    @Test func theRuleSeesCodeAndNotText() {
        let code = """
            if json { x() }  // json
            let a = group.contains(where: \\.json) /* json */
            f(json: true, "json \\(json ? "json" : #"json"#)")
            let jsonLines = "--json"; let b = \"""
                json
                \"""
            """
        let found = SwiftCode.identifiers(code).filter { $0.identifier == "json" }.map(\.line)
        #expect(found == [1, 2, 3, 3])
        #expect(SwiftCode.identifiers(code).contains { $0.identifier == "jsonLines" })
    }
}

/// Just enough of Swift's lexical structure to tell code from comments and
/// string literals (with their interpolations, raw and multi-line forms).
enum SwiftCode {
    static func identifiers(_ text: String) -> [(line: Int, identifier: String)] {
        var lexer = Lexer(Array(text.unicodeScalars))
        lexer.code(until: nil)
        return lexer.found
    }

    struct Lexer {
        let scalars: [Unicode.Scalar]
        var index = 0
        var line = 1
        var found: [(line: Int, identifier: String)] = []

        init(_ scalars: [Unicode.Scalar]) { self.scalars = scalars }

        func peek(_ offset: Int = 0) -> Unicode.Scalar? {
            index + offset < scalars.count ? scalars[index + offset] : nil
        }

        mutating func advance() {
            if scalars[index] == "\n" { line += 1 }
            index += 1
        }

        static func isIdentifierStart(_ scalar: Unicode.Scalar) -> Bool {
            scalar == "_" || scalar.properties.isAlphabetic
        }

        /// Code up to an unbalanced `closing` (an interpolation's `)`), or the end.
        mutating func code(until closing: Unicode.Scalar?) {
            var depth = 0
            while let scalar = peek() {
                if scalar == "/", peek(1) == "/" {
                    while let next = peek(), next != "\n" { advance() }
                } else if scalar == "/", peek(1) == "*" {
                    advance()
                    advance()
                    while peek() != nil, !(peek() == "*" && peek(1) == "/") { advance() }
                    if peek() != nil {
                        advance()
                        advance()
                    }
                } else if scalar == "\"" || (scalar == "#" && (peek(1) == "\"" || peek(1) == "#")) {
                    string()
                } else if Self.isIdentifierStart(scalar) {
                    let start = index
                    let startLine = line
                    while let next = peek(), Self.isIdentifierStart(next) || next.properties.numericType != nil {
                        advance()
                    }
                    found.append((startLine, String(String.UnicodeScalarView(scalars[start..<index]))))
                } else if scalar == "(" {
                    depth += 1
                    advance()
                } else if scalar == ")" {
                    if depth == 0, closing == ")" {
                        advance()
                        return
                    }
                    depth -= 1
                    advance()
                } else {
                    advance()
                }
            }
        }

        /// A string literal: `"…"`, `"""…"""`, with any number of `#`.
        mutating func string() {
            var hashes = 0
            while peek() == "#" {
                hashes += 1
                advance()
            }
            let multiline = peek() == "\"" && peek(1) == "\"" && peek(2) == "\""
            for _ in 0..<(multiline ? 3 : 1) { advance() }
            let delimiter = multiline ? 3 : 1
            while let scalar = peek() {
                if scalar == "\\" {
                    // `\(`, `\#(`…: an interpolation; `\n`, `\#n`…: an escape; a
                    // backslash without its `#`s in a raw string: itself.
                    var offset = 1
                    while offset <= hashes, peek(offset) == "#" { offset += 1 }
                    if offset <= hashes {
                        advance()
                    } else if peek(offset) == "(" {
                        for _ in 0...offset { advance() }
                        code(until: ")")
                    } else {
                        for _ in 0..<offset { advance() }
                        if peek() != nil { advance() }
                    }
                } else if scalar == "\"", (0..<delimiter).allSatisfy({ peek($0) == "\"" }),
                    (0..<hashes).allSatisfy({ peek(delimiter + $0) == "#" })
                {
                    for _ in 0..<(delimiter + hashes) { advance() }
                    return
                } else {
                    advance()
                }
            }
        }
    }
}
