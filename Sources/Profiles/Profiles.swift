// Profiles: named threshold profiles (car, van, truck, …) loaded from
// profiles/, validated completely before any device is touched.
//
// Filled by the issue "Inventory and profiles".
