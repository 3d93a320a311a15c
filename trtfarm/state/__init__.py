"""The one read model of the store: what it holds, each (model, target) cell, the record, the views' entry points."""
