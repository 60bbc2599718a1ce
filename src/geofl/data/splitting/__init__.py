"""The global train/validation/test split and the partitioners of the train split over clients."""
