import DBusBinding

/// What `BlueZDecoder` read from one signal, in order, for the registry to
/// apply once the decoder returns: names and values are borrowed views
/// into the message, valid while the signal is being handled (the
/// registry applies them before its handler returns). The list's storage
/// is handed back and forth with the registry, so that a signal costs no
/// allocation once it has grown.
struct WireEvents: WirePropertySink {
    enum Event {
        case interface(WireName)
        case property(WireName, WireValue)
        case invalidated(WireName)
        case removed(WireName)
    }

    /// The object the signal is about (the first one: signals carry one).
    private(set) var path: WireName?
    private(set) var list: [Event]

    init(taking storage: inout [Event]) {
        list = []
        swap(&list, &storage)
        list.removeAll(keepingCapacity: true)
    }

    /// The storage, emptied, for the next signal.
    mutating func give() -> [Event] {
        list.removeAll(keepingCapacity: true)
        var storage: [Event] = []
        swap(&storage, &list)
        return storage
    }

    /// The first interface named (PropertiesChanged names one).
    var firstInterface: WireName? {
        for case .interface(let name) in list { return name }
        return nil
    }

    mutating func beginObject(path: WireName) {
        if self.path == nil { self.path = path }
    }

    mutating func interface(_ name: WireName) { list.append(.interface(name)) }
    mutating func property(_ name: WireName, _ value: WireValue) { list.append(.property(name, value)) }
    mutating func invalidated(_ name: WireName) { list.append(.invalidated(name)) }
    mutating func interfaceRemoved(_ name: WireName) { list.append(.removed(name)) }
    mutating func end() {}
}
