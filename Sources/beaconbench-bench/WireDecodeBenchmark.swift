import DBusBinding
import Glibc

/// `beaconbench-bench wire-decode`: the cost of decoding one
/// PropertiesChanged of RSSI and ManufacturerData (the signal a scan
/// receives most), the fast path against the libdbus path, on one thread,
/// no bus; in thread CPU time (docs/dbus-binding.md, "Fast decoding", has
/// the figures and the `malloc` count, taken with a uprobe).
struct WireDecodeResult {
    var scenario: String
    var iterations: Int
    var nanosecondsPerMessage: Double
}

/// What a registry does with the hot signal: compare with the stored
/// values, store only what changed.
struct StoredDevice: WirePropertySink {
    var rssi: Int16 = 0
    var manufacturer: [UInt8] = []
    var changes = 0

    mutating func beginObject(path: WireName) {}
    mutating func interface(_ name: WireName) {}
    mutating func property(_ name: WireName, _ value: WireValue) {
        if name.id == BlueZName.rssi, let rssi = value.int16 {
            if rssi != self.rssi {
                self.rssi = rssi
                changes += 1
            }
        } else if name.id == BlueZName.manufacturerData {
            value.forEachEntry { _, data in
                if !data.bytesEqual(manufacturer), let bytes = data.bytes {
                    manufacturer = Array(bytes)
                    changes += 1
                }
            }
        }
    }
    mutating func invalidated(_ name: WireName) {}
    mutating func interfaceRemoved(_ name: WireName) {}
    mutating func end() {}
}

func wireDecodeBenchmark(iterations: Int, only: String?) throws -> [WireDecodeResult] {
    let message = WireDifferential.hotSignal()
    var results: [WireDecodeResult] = []
    func measure(_ scenario: String, _ body: () throws -> Void) rethrows {
        guard only == nil || scenario.hasPrefix(only!) else { return }
        for _ in 0..<(iterations / 10) { try body() }  // warm up
        // The thread's CPU time, not the wall clock: on a shared machine the
        // wall clock also counts the time other processes held the CPU.
        let started = threadCPUNanoseconds()
        for _ in 0..<iterations { try body() }
        let nanoseconds = Double(threadCPUNanoseconds() - started)
        results.append(
            .init(scenario: scenario, iterations: iterations, nanosecondsPerMessage: nanoseconds / Double(iterations)))
    }
    var sum = 0
    try measure("slow: libdbus demarshal + decodeBody + the two maps") {
        let values = try WireMessage.decodeBody(marshalled: message)
        let changed = values[1].stringKeyedDictionary ?? [:]
        sum &+= changed.count
        if let data = changed["ManufacturerData"]?.uint16KeyedDictionary { sum &+= data.count }
    }
    let names = InternTable.blueZ()
    let paths = InternTable(maximumNames: 1 << 16)
    var device = StoredDevice()
    try message.withUnsafeBytes { bytes in
        try measure("fast: validate whole message only") {
            let view = try WireMessageView(validating: bytes)
            sum &+= view.header.fixed.bodyLength
        }
        try measure("fast: validate + decode into a registry-like sink") {
            let view = try WireMessageView(validating: bytes)
            BlueZDecoder.decode(view, names: names, paths: paths, into: &device)
        }
    }
    if sum == 42 { print("") }  // keeps the work
    return results
}

/// CPU time this thread has used (`CLOCK_THREAD_CPUTIME_ID`).
func threadCPUNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}
