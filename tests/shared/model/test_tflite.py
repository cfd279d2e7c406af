def test_placeholder():
    import shared.model.tflite as m
    assert m.tflite_available()
