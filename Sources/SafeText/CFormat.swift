#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// printf-style formatting of numbers (`%04x`, `%.1f`, `%g`) through the C
/// library's `vsnprintf`: what `String(format:)` did, without Foundation
/// (whose ICU data cost every start; docs/benchmarks.md, "Start-up").
/// Only for numbers: a `%s` would want a C string, and callers pass none.
public enum CFormat {
    /// `format` with `arguments`, as C's printf writes them.
    public static func string(_ format: String, _ arguments: any CVarArg...) -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        let needed = withVaList(arguments) { vsnprintf(&buffer, buffer.count, format, $0) }
        if needed < 0 { return "" }
        if Int(needed) >= buffer.count {
            buffer = [CChar](repeating: 0, count: Int(needed) + 1)
            _ = withVaList(arguments) { vsnprintf(&buffer, buffer.count, format, $0) }
        }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
