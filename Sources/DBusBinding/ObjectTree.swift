/// The objects a connection serves, and the object managers among them.
/// A plain value, confined to the connection's thread.
struct ObjectTree {
    struct Entry {
        var definition: BusInterface
        var values: [String: BusValue]
    }

    struct Object {
        /// In the order they were added, for stable introspection.
        var interfaces: [InterfaceName: Entry] = [:]
        var order: [InterfaceName] = []
    }

    private(set) var objects: [ObjectPath: Object] = [:]
    private(set) var managers: Set<ObjectPath> = []

    /// The interfaces every exported object has, listed by GetManagedObjects
    /// and InterfacesAdded as bluetoothd lists them.
    static let standardInterfaces: [InterfaceName] = [.introspectable, .properties]

    subscript(path: ObjectPath) -> Object? { objects[path] }

    func entry(_ path: ObjectPath, _ interface: InterfaceName) -> Entry? {
        objects[path]?.interfaces[interface]
    }

    /// Adds (or replaces) an interface; returns whether the object is new.
    mutating func add(_ definition: BusInterface, values: [String: BusValue], at path: ObjectPath) -> Bool {
        let isNew = objects[path] == nil
        var object = objects[path] ?? Object()
        if object.interfaces[definition.name] == nil { object.order.append(definition.name) }
        object.interfaces[definition.name] = Entry(definition: definition, values: values)
        objects[path] = object
        return isNew
    }

    /// Removes some interfaces (all when `names` is nil); returns those
    /// removed and whether the object is gone.
    mutating func remove(_ names: [InterfaceName]?, at path: ObjectPath) -> (removed: [InterfaceName], objectGone: Bool)
    {
        guard var object = objects[path] else { return ([], false) }
        let removing = names.map { $0.filter { object.interfaces[$0] != nil } } ?? object.order
        for name in removing { object.interfaces[name] = nil }
        object.order.removeAll { removing.contains($0) }
        if object.interfaces.isEmpty {
            objects[path] = nil
            return (removing, true)
        }
        objects[path] = object
        return (removing, false)
    }

    mutating func setValue(_ value: BusValue?, _ name: String, _ interface: InterfaceName, at path: ObjectPath) {
        objects[path]?.interfaces[interface]?.values[name] = value
    }

    mutating func addManager(_ path: ObjectPath) { managers.insert(path) }
    mutating func removeManager(_ path: ObjectPath) { managers.remove(path) }

    /// The closest object manager strictly above `path`.
    func manager(above path: ObjectPath) -> ObjectPath? {
        var current = path.parent
        while let candidate = current {
            if managers.contains(candidate) { return candidate }
            current = candidate.parent
        }
        return nil
    }

    /// The names of the nodes directly below `path` that hold or lead to
    /// objects, for `<node name=…/>`.
    func childNames(of path: ObjectPath) -> [String] {
        var names = Set<String>()
        let depth = path.components.count
        for candidate in objects.keys where path.isAncestor(of: candidate) {
            names.insert(String(candidate.components[depth]))
        }
        return names.sorted()
    }

    /// True when something is exported at or below `path`.
    func hasNode(at path: ObjectPath) -> Bool {
        objects[path] != nil || managers.contains(path) || objects.keys.contains { path.isAncestor(of: $0) }
    }

    /// One object's interfaces as `a{sa{sv}}`, standard interfaces included.
    func interfacesAndProperties(
        at path: ObjectPath, only names: [InterfaceName]? = nil, includeStandard: Bool
    )
        -> BusValue
    {
        var entries: [BusValue.DictEntry] = []
        if includeStandard {
            for name in Self.standardInterfaces {
                entries.append(.init(.string(name.rawValue), .propertyMap([:])))
            }
        }
        if let object = objects[path] {
            for name in names ?? object.order {
                guard let entry = object.interfaces[name] else { continue }
                entries.append(.init(.string(name.rawValue), entry.readableValues))
            }
        }
        return .dictionary(key: .string, value: .propertyMap, entries)
    }

    /// `a{oa{sa{sv}}}` of every object below `manager`.
    func managedObjects(under manager: ObjectPath) -> BusValue {
        let paths = objects.keys.filter { manager.isAncestor(of: $0) }.sorted()
        return .dictionary(
            key: .objectPath, value: .dictionary(key: .string, value: .propertyMap),
            paths.map { .init(.objectPath($0), interfacesAndProperties(at: $0, includeStandard: true)) })
    }
}

extension ObjectTree.Entry {
    /// The readable properties that have a value, as `a{sv}`.
    var readableValues: BusValue {
        var readable: [String: BusValue] = [:]
        for property in definition.properties where property.access != .write {
            if let value = values[property.name] { readable[property.name] = value }
        }
        return .propertyMap(readable)
    }
}
