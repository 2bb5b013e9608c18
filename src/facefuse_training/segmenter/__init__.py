"""Training of the face segmentation model shipped as ``facefuse/models/weights/face_segmenter.onnx``."""
