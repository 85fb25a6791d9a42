/// Names (property and interface names, object paths) interned by their
/// bytes: a lookup hashes the bytes (FNV-1a) and compares them with
/// `memcmp`-like equality, with no `String` and no `Hasher`. Bounded: past
/// `maximumNames` names (or for a name longer than `maximumNameBytes`)
/// `id(_:)` answers nil and the caller keeps the name's bytes instead, so a
/// hostile peer cannot grow it without bound.
///
/// Not thread-safe: one table belongs to one reader (the connection's
/// thread), as the registry it feeds does.
public final class InternTable {
    public struct ID: Hashable, Sendable, Comparable {
        public let rawValue: UInt32
        public init(rawValue: UInt32) { self.rawValue = rawValue }
        public static func < (a: ID, b: ID) -> Bool { a.rawValue < b.rawValue }
    }

    public let maximumNames: Int
    public let maximumNameBytes: Int
    // Raw storage, not arrays: a lookup on the hot path then costs no
    // exclusivity check and no copy-on-write check (measured: with arrays
    // these were a quarter of a lookup).
    private var arena: UnsafeMutableRawPointer
    private var arenaCapacity: Int
    private var arenaCount = 0
    /// Per id: where its bytes start in the arena, and their count.
    private let starts: UnsafeMutablePointer<UInt32>
    private let lengths: UnsafeMutablePointer<UInt32>
    public private(set) var count = 0
    /// Open addressing: 0 empty, else id + 1. Capacity a power of two, at
    /// least twice the names it may hold.
    private let slots: UnsafeMutablePointer<UInt32>
    private let mask: Int

    /// - Parameter names: interned first, in order: their ids are 0, 1, 2 …
    public init(names: [StaticString] = [], maximumNames: Int = 4096, maximumNameBytes: Int = 256) {
        self.maximumNames = max(maximumNames, names.count)
        self.maximumNameBytes = maximumNameBytes
        var capacity = 16
        while capacity < 2 * self.maximumNames { capacity <<= 1 }
        slots = .allocate(capacity: capacity)
        slots.initialize(repeating: 0, count: capacity)
        mask = capacity - 1
        starts = .allocate(capacity: self.maximumNames)
        lengths = .allocate(capacity: self.maximumNames)
        arenaCapacity = 4096
        arena = .allocate(byteCount: arenaCapacity, alignment: 8)
        for name in names {
            _ = id(UnsafeRawBufferPointer(start: name.utf8Start, count: name.utf8CodeUnitCount))
        }
    }

    deinit {
        slots.deallocate()
        starts.deallocate()
        lengths.deallocate()
        arena.deallocate()
    }

    @inline(__always)
    private static func hash(_ bytes: UnsafeRawBufferPointer) -> Int {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            h = (h ^ UInt64(byte)) &* 0x100_0000_01b3
        }
        return Int(truncatingIfNeeded: h ^ (h >> 29))
    }

    @inline(__always)
    private func matches(_ id: Int, _ bytes: UnsafeRawBufferPointer) -> Bool {
        guard Int(lengths[id]) == bytes.count else { return false }
        let stored = arena + Int(starts[id])
        for index in 0..<bytes.count where stored.load(fromByteOffset: index, as: UInt8.self) != bytes[index] {
            return false
        }
        return true
    }

    /// The name's id if it is interned already.
    public func lookup(_ bytes: UnsafeRawBufferPointer) -> ID? {
        var slot = Self.hash(bytes) & mask
        while true {
            let entry = slots[slot]
            if entry == 0 { return nil }
            if matches(Int(entry - 1), bytes) { return ID(rawValue: entry - 1) }
            slot = (slot + 1) & mask
        }
    }

    /// The name's id, interning it if there is room; nil when the table is
    /// full or the name too long.
    public func id(_ bytes: UnsafeRawBufferPointer) -> ID? {
        var slot = Self.hash(bytes) & mask
        while true {
            let entry = slots[slot]
            if entry == 0 { break }
            if matches(Int(entry - 1), bytes) { return ID(rawValue: entry - 1) }
            slot = (slot + 1) & mask
        }
        guard count < maximumNames, bytes.count <= maximumNameBytes else { return nil }
        if arenaCount + bytes.count > arenaCapacity {
            var capacity = arenaCapacity * 2
            while arenaCount + bytes.count > capacity { capacity *= 2 }
            let grown = UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 8)
            grown.copyMemory(from: arena, byteCount: arenaCount)
            arena.deallocate()
            arena = grown
            arenaCapacity = capacity
        }
        if let base = bytes.baseAddress { (arena + arenaCount).copyMemory(from: base, byteCount: bytes.count) }
        let id = UInt32(count)
        starts[count] = UInt32(arenaCount)
        lengths[count] = UInt32(bytes.count)
        arenaCount += bytes.count
        count += 1
        slots[slot] = id + 1
        return ID(rawValue: id)
    }

    /// The id of a name given as text (interning it if there is room).
    public func id(_ text: String) -> ID? {
        var text = text
        return text.withUTF8 { id(UnsafeRawBufferPointer($0)) }
    }

    /// An interned name's text (allocates).
    public func string(_ id: ID) -> String {
        precondition(Int(id.rawValue) < count, "an id this table did not give")
        let start = Int(starts[Int(id.rawValue)])
        let length = Int(lengths[Int(id.rawValue)])
        return String(decoding: UnsafeRawBufferPointer(start: arena + start, count: length), as: UTF8.self)
    }
}

/// BlueZ' names, interned first by `InternTable.blueZ()` so that their ids
/// are constants the registry can switch on.
public enum BlueZName {
    public static let all: [StaticString] = [
        "Address", "AddressType", "Name", "Alias", "RSSI", "TxPower", "ManufacturerData", "ServiceData",
        "AdvertisingData", "AdvertisingFlags", "Connected", "ServicesResolved", "Adapter", "UUIDs", "Paired",
        "Bonded", "Trusted", "Blocked", "LegacyPairing", "Powered", "Discovering", "Roles", "UUID", "Flags",
        "Value", "Notifying", "Service", "Characteristic", "Device", "Primary", "Handle", "MTU", "Includes",
        "Class", "Appearance", "Icon", "Modalias", "WakeAllowed", "Discoverable", "Pairable",
        "org.bluez.Adapter1", "org.bluez.Device1", "org.bluez.GattService1", "org.bluez.GattCharacteristic1",
        "org.bluez.GattDescriptor1", "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable",
    ]

    @inline(__always) static func id(_ index: UInt32) -> InternTable.ID { InternTable.ID(rawValue: index) }
    public static let address = id(0)
    public static let addressType = id(1)
    public static let name = id(2)
    public static let alias = id(3)
    public static let rssi = id(4)
    public static let txPower = id(5)
    public static let manufacturerData = id(6)
    public static let serviceData = id(7)
    public static let advertisingData = id(8)
    public static let advertisingFlags = id(9)
    public static let connected = id(10)
    public static let servicesResolved = id(11)
    public static let adapter = id(12)
    public static let uuids = id(13)
    public static let uuid = id(22)
    public static let flags = id(23)
    public static let adapter1 = id(40)
    public static let device1 = id(41)
    public static let gattService1 = id(42)
    public static let gattCharacteristic1 = id(43)
    public static let gattDescriptor1 = id(44)
}

extension InternTable {
    /// A table for property and interface names with BlueZ' names at the
    /// ids `BlueZName` gives.
    public static func blueZ(maximumNames: Int = 4096) -> InternTable {
        InternTable(names: BlueZName.all, maximumNames: maximumNames)
    }
}
