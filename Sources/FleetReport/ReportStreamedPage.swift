import FoundationEssentials
import SafeText

#if canImport(Glibc)
    import Glibc
#endif

/// The device table's rows of a streamed report (`FleetReport.streamed`),
/// kept on disk as they are made — in a file that has no name (made in
/// `directory`, unlinked at once, so it goes on every exit path) — until
/// the page is written (`ReportPage.write`): one row's JSON per line,
/// joined as the data block joins them.
public final class ReportRowsFile: @unchecked Sendable {
    // Used by one task at a time: filled while the report is folded, read
    // while the page is written.
    let descriptor: Int32
    let directory: String
    private var buffer: [UInt8] = []
    /// Bytes of rows so far (separators included).
    public private(set) var bytes = 0
    public private(set) var rows = 0

    /// `page`: the page the rows are for (named when they cannot be kept).
    public init(directory: String, page: String? = nil) throws(OutputFile.Refusal) {
        self.directory = directory
        var template = Array((directory + "/.beaconbench-rows-XXXXXX").utf8CString)
        let descriptor = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard descriptor >= 0 else {
            throw OutputFile.Refusal(
                path: page ?? directory,
                reason: page == nil
                    ? "cannot hold the report's rows: \(String(cString: strerror(errno)))"
                    : "cannot be written: its directory \(directory): \(String(cString: strerror(errno)))")
        }
        let name = template.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
        unlink(name)
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    func fail(_ what: String) -> OutputFile.Refusal {
        OutputFile.Refusal(
            path: directory, reason: "cannot \(what) the report's rows: \(String(cString: strerror(errno)))")
    }

    /// One row's JSON, after the others.
    public func append(_ row: String) throws(OutputFile.Refusal) {
        if rows > 0 { buffer.append(contentsOf: DeviceTableSection.TableJSON.separator.utf8) }
        buffer.append(contentsOf: row.utf8)
        rows += 1
        if buffer.count >= 1 << 20 { try flush() }
    }

    /// Forgets every row (a read that starts again).
    public func reset() throws(OutputFile.Refusal) {
        buffer = []
        bytes = 0
        rows = 0
        guard ftruncate(descriptor, 0) == 0 else { throw fail("empty") }
    }

    func flush() throws(OutputFile.Refusal) {
        var offset = 0
        while offset < buffer.count {
            let written = buffer[offset...].withUnsafeBytes {
                pwrite(descriptor, $0.baseAddress, $0.count, off_t(bytes))
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw fail("write")
            }
            offset += written
            bytes += written
        }
        buffer.removeAll(keepingCapacity: true)
    }

    /// Every byte written, a piece at a time.
    func read(_ body: ([UInt8]) throws(OutputFile.Refusal) -> Void) throws(OutputFile.Refusal) {
        try flush()
        var offset = 0
        var piece = [UInt8](repeating: 0, count: 1 << 20)
        while offset < bytes {
            let count = piece.withUnsafeMutableBytes { pread(descriptor, $0.baseAddress, $0.count, off_t(offset)) }
            if count < 0 {
                if errno == EINTR { continue }
                throw fail("read")
            }
            if count == 0 { break }
            try body(Array(piece[0..<count]))
            offset += count
        }
    }

    /// Bytes of rows, the buffer's included.
    var total: Int { bytes + buffer.count }
}

extension ReportPage {
    /// The page of a streamed report (`FleetReport.streamed`) to `writer`:
    /// the same bytes `html` makes of the same report with its rows, the
    /// data block deflated and base64'd a piece at a time.
    public static func write(
        _ report: FleetReport, tableHead: String, rows: ReportRowsFile, nonce: String = ReportPage.nonce(),
        to writer: inout OutputFile.Writer
    ) throws(OutputFile.Refusal) {
        try writer.write(top(report, nonce: nonce))
        let head = Array(tableHead.utf8)
        let tail = Array(DeviceTableSection.TableJSON.tail.utf8)
        let total = head.count + rows.total + tail.count
        if total > deflateAbove, let deflate = DeflateStream() {
            try writer.write(
                "<script type=\"application/octet-stream\" id=\"report-data\" data-encoding=\"deflate\">")
            var pending: [UInt8] = []
            func emit(
                _ bytes: [UInt8]?, _ writer: inout OutputFile.Writer, last: Bool = false
            ) throws(OutputFile.Refusal) {
                guard let bytes else { throw rows.fail("deflate") }
                pending.append(contentsOf: bytes)
                let whole = last ? pending.count : pending.count / 3 * 3
                guard whole > 0 else { return }
                try writer.write(Data(pending[0..<whole]).base64EncodedString())
                pending.removeFirst(whole)
            }
            try emit(deflate.add(head), &writer)
            try rows.read { (piece) throws(OutputFile.Refusal) in try emit(deflate.add(piece), &writer) }
            try emit(deflate.add(tail), &writer)
            try emit(deflate.finish(), &writer, last: true)
            try writer.write("</script>")
        } else {
            var json = head
            try rows.read { json.append(contentsOf: $0) }
            json.append(contentsOf: tail)
            try writer.write("<script type=\"application/json\" id=\"report-data\">")
            try writer.write(json)
            try writer.write("</script>")
        }
        try writer.write(bottom(nonce: nonce))
    }
}
